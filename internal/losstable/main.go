// Command losstable measures RC loss and reordering recovery of two builds
// in one run: 1 MiB RDMA WRITE, READ and SEND, 16 in flight, between two
// devices joined by link/pipe with no faults, 1 % and 5 % loss, and 25 % of
// the datagrams held back 2 ms, both directions (verbs' TestLossTable). It
// builds package verbs' test binary from the working tree and from an older
// revision (a temporary git worktree with the working tree's
// losstable_test.go copied in), runs every case with each binary in turn
// (the order swapped every other round) and prints the medians as a
// Markdown table: MB/s and retransmit timeouts per MiB, old → new, and the
// ratio.
//
//	go run ./internal/losstable                  # main against the working tree, 3 s per case, 1 round
//	go run ./internal/losstable -old HEAD~3 -secs 5 -rounds 3 -only read
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

var (
	oldRef = flag.String("old", "main", "the git revision to compare with")
	secs   = flag.Float64("secs", 3, "seconds per case and build")
	rounds = flag.Int("rounds", 1, "rounds (medians are printed)")
	only   = flag.String("only", "", "one operation (write, read, send), condition (none, loss1, loss5, reorder25) or op/condition")
)

var (
	ops   = []string{"write", "read", "send"}
	conds = []struct{ name, label string }{
		{"none", "none"}, {"loss1", "1 % loss"}, {"loss5", "5 % loss"}, {"reorder25", "25 % reordering, 2 ms"},
	}
)

type result struct{ mbs, tmo float64 }

func main() {
	log.SetFlags(0)
	log.SetPrefix("losstable: ")
	flag.Parse()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		log.Fatal("run inside the softroce repository: ", err)
	}
	top := strings.TrimSpace(string(root))
	tmp, err := os.MkdirTemp("", "losstable")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	oldTree := filepath.Join(tmp, "old")
	run(top, "git", "worktree", "add", "--detach", oldTree, *oldRef)
	defer run(top, "git", "worktree", "remove", "--force", oldTree)
	src, err := os.ReadFile(filepath.Join(top, "verbs", "losstable_test.go"))
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(oldTree, "verbs", "losstable_test.go"), src, 0o644); err != nil {
		log.Fatal(err)
	}
	bins := [2]string{filepath.Join(tmp, "old.test"), filepath.Join(tmp, "new.test")}
	run(oldTree, "go", "test", "-c", "-o", bins[0], "./verbs")
	run(top, "go", "test", "-c", "-o", bins[1], "./verbs")
	res := map[string][2][]result{}
	for r := 0; r < *rounds; r++ {
		for _, op := range ops {
			for _, c := range conds {
				name := op + "/" + c.name
				if *only != "" && *only != op && *only != c.name && *only != name {
					continue
				}
				order := []int{0, 1}
				if r%2 == 1 {
					order = []int{1, 0}
				}
				v := res[name]
				for _, b := range order {
					x := measure(bins[b], filepath.Join(top, "verbs"), name)
					fmt.Fprintf(os.Stderr, "%s %s: %.3f MB/s, %.3f timeouts/MiB\n", []string{"old", "new"}[b], name, x.mbs, x.tmo)
					v[b] = append(v[b], x)
				}
				res[name] = v
			}
		}
	}
	fmt.Printf("| condition (1 MiB, 16 in flight; old %s → new) | WRITE MB/s | READ MB/s | SEND MB/s | timeouts per MiB W / R / S |\n", *oldRef)
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, c := range conds {
		row := []string{c.label}
		var tmo []string
		for _, op := range ops {
			v, ok := res[op+"/"+c.name]
			if !ok {
				row = append(row, "")
				tmo = append(tmo, "")
				continue
			}
			o, n := median(v[0]), median(v[1])
			row = append(row, fmt.Sprintf("%s → %s (%s)", num(o.mbs), num(n.mbs), ratio(n.mbs, o.mbs)))
			tmo = append(tmo, fmt.Sprintf("%s → %s", num(o.tmo), num(n.tmo)))
		}
		row = append(row, strings.Join(tmo, " / "))
		fmt.Println("| " + strings.Join(row, " | ") + " |")
	}
}

// measure runs one case of TestLossTable with the test binary bin.
func measure(bin, dir, name string) result {
	cmd := exec.Command(bin, "-test.run", "^TestLossTable$", "-test.count", "1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SOFTROCE_LOSS_TABLE="+strconv.FormatFloat(*secs, 'f', -1, 64),
		"SOFTROCE_LOSS_TABLE_ONLY="+name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		log.Fatalf("%s %s: %v\n%s", bin, name, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// LOSSTABLE op cond MB/s-value "MB/s" timeouts "timeouts/MiB" MiB "MiB"
		if len(f) >= 7 && f[0] == "LOSSTABLE" {
			mbs, err1 := strconv.ParseFloat(f[3], 64)
			tmo, err2 := strconv.ParseFloat(f[5], 64)
			if err1 == nil && err2 == nil {
				return result{mbs, tmo}
			}
		}
	}
	log.Fatalf("%s %s: no LOSSTABLE line in\n%s", bin, name, out)
	return result{}
}

func median(v []result) result {
	m := func(f func(result) float64) float64 {
		x := make([]float64, len(v))
		for i := range v {
			x[i] = f(v[i])
		}
		slices.Sort(x)
		return x[len(x)/2]
	}
	return result{m(func(r result) float64 { return r.mbs }), m(func(r result) float64 { return r.tmo })}
}

func num(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func ratio(n, o float64) string {
	if o == 0 {
		return "—"
	}
	return strconv.FormatFloat(n/o, 'f', 1, 64) + "×"
}

func run(dir string, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
