// Command install builds softroce's C library (a drop-in libibverbs.so.1
// and librdmacm.so.1) and installs it, by default into
// ~/.local/lib/softroce:
//
//	go run ./capi/install [-o DIR]
//
// Then run an unmodified program on softroce with
// LD_LIBRARY_PATH=DIR prog, or softroce exec [-d DEV] -- prog.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/softroce/softroce/internal/capibuild"
)

func main() {
	def, _ := capibuild.Dir()
	out := flag.String("o", def, "directory to install the library into")
	force := flag.Bool("a", false, "rebuild everything (go build -a)")
	flag.Parse()
	root, err := capibuild.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		os.Exit(1)
	}
	var extra []string
	if *force {
		extra = append(extra, "-a")
	}
	if err := capibuild.Build(root, *out, extra...); err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		os.Exit(1)
	}
	fmt.Printf("installed %s/%s (and %v)\nrun a program on softroce: LD_LIBRARY_PATH=%s PROGRAM, or softroce exec -- PROGRAM\n",
		*out, capibuild.Lib, capibuild.Links, *out)
}
