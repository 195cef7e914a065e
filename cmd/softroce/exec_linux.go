//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/toolkit"
)

// The device view. Some programs look for an RDMA device in the file
// system before they ask libibverbs: UCX skips every device whose
// /dev/infiniband/uverbsN is not a character device it may open for
// reading and writing, and reads each GID's type and netdev from
// /sys/class/infiniband/DEV/ports/1/gid_attrs. On a host with no RDMA
// hardware neither exists, so softroce exec runs the program in a private
// mount namespace where both do: /dev/infiniband/uverbsN is /dev/null bound
// in its place (UCX only stats and access()es it; the library opens
// nothing), /sys/class/infiniband/DEV a tmpfs of rdma_rxe's files
// (toolkit.IBSysfsFiles). Where /dev/infiniband or /sys/class/infiniband
// does not exist, its parent is shadowed: a tmpfs with every entry of the
// original bound (or, for a symbolic link, copied) in place, and the new
// directory beside them.
//
// As root the namespace is the program's own (unshare, then exec). Without
// root a user namespace gives the right to mount: softroce exec starts
// itself in a new user and mount namespace, with the caller's user and
// group mapped to themselves and CAP_SYS_ADMIN kept across that one exec;
// that child builds the view, drops the capability and execs the program,
// while the parent forwards signals and exits as the program does.

// viewChildEnv tells a softroce started in the new namespaces to build the
// view and exec the program it names.
const viewChildEnv = "SOFTROCE_EXEC_VIEW_CHILD"

func init() {
	if path := os.Getenv(viewChildEnv); path != "" {
		os.Exit(viewChild(path))
	}
}

// execProgram replaces the process with the program, in the device view
// when view is set; it returns only on failure.
func execProgram(path string, argv, env []string, view bool, stderr *os.File) error {
	if view {
		devs, err := viewDevices(env)
		switch {
		case err != nil:
			warnNoView(stderr, err)
		case os.Geteuid() == 0:
			if err := enterViewAsRoot(devs); err != nil {
				warnNoView(stderr, err)
			}
		default:
			err := runInUserNS(path, argv, env)
			warnNoView(stderr, err) // it returns only when it could not start
		}
	}
	return syscall.Exec(path, argv, env)
}

func warnNoView(w *os.File, err error) {
	fmt.Fprintf(w, "softroce exec: no /dev/infiniband and /sys/class/infiniband view (%v): programs that look there (UCX) will not find the devices; running without it\n", err)
}

// viewDevices lists the devices the library will offer the program.
func viewDevices(env []string) ([]toolkit.LibraryDevice, error) {
	dev := ""
	for _, kv := range env {
		if len(kv) > len(execEnvDevice) && kv[:len(execEnvDevice)+1] == execEnvDevice+"=" {
			dev = kv[len(execEnvDevice)+1:]
		}
	}
	devs, _, err := toolkit.LibraryDevices(dev)
	return devs, err
}

// enterViewAsRoot moves this thread into a new mount namespace holding the
// view; the exec that follows takes the namespace with it. On failure the
// thread is back in its old namespace.
func enterViewAsRoot(devs []toolkit.LibraryDevice) error {
	runtime.LockOSThread() // never unlocked: the thread execs
	old, err := os.Open("/proc/thread-self/ns/mnt")
	if err != nil {
		return err
	}
	defer old.Close()
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := buildView(devs); err != nil {
		if serr := setns(int(old.Fd()), syscall.CLONE_NEWNS); serr != nil {
			return fmt.Errorf("%v; and returning to the old mount namespace: %v", err, serr)
		}
		return err
	}
	return nil
}

func setns(fd, nstype int) error {
	_, _, e := syscall.RawSyscall(unix.SYS_SETNS, uintptr(fd), uintptr(nstype), 0)
	if e != 0 {
		return e
	}
	return nil
}

// runInUserNS runs the program through a child softroce in new user and
// mount namespaces and exits as the program does; it returns only when the
// child could not start.
func runInUserNS(path string, argv, env []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Pdeathsig belongs to the thread that started the child.
	runtime.LockOSThread()
	cmd := &exec.Cmd{Path: self, Args: argv, Env: append(env[:len(env):len(env)], viewChildEnv+"="+path),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		AmbientCaps: []uintptr{capSysAdmin},
		Pdeathsig:   syscall.SIGKILL,
	}
	// Signals sent to this process go on to the program. Those a terminal
	// sends reach the whole foreground process group, the program too:
	// Ctrl-C and Ctrl-\ are not relayed a second time (this process ignores
	// them and waits for the program's exit), and Ctrl-Z stops both.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM)
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		signal.Reset()
		runtime.UnlockOSThread()
		return fmt.Errorf("user namespace: %w", err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	signal.Reset()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// Die of the same signal, as a shell reports it.
			syscall.Kill(os.Getpid(), ws.Signal())
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softroce exec: %v\n", err)
		os.Exit(126)
	}
	os.Exit(0)
	return nil
}

const (
	capSysAdmin        = unix.CAP_SYS_ADMIN
	viewChildExitNoRun = 126
)

// viewChild is the child in the new user and mount namespaces: it builds
// the view, gives up CAP_SYS_ADMIN and execs the program.
func viewChild(path string) int {
	env := os.Environ()
	out := env[:0]
	for _, kv := range env {
		if len(kv) < len(viewChildEnv)+1 || kv[:len(viewChildEnv)+1] != viewChildEnv+"=" {
			out = append(out, kv)
		}
	}
	devs, err := viewDevices(out)
	if err == nil {
		err = buildView(devs)
	}
	if err != nil {
		warnNoView(os.Stderr, err)
	}
	// Without ambient capabilities, exec under a user ID other than 0
	// leaves the program none.
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		fmt.Fprintf(os.Stderr, "softroce exec: dropping CAP_SYS_ADMIN: %v\n", e)
		return viewChildExitNoRun
	}
	err = syscall.Exec(path, os.Args, out)
	fmt.Fprintf(os.Stderr, "softroce exec: %s: %v\n", os.Args[0], err)
	return viewChildExitNoRun
}

// buildView mounts the view in the current (private) mount namespace:
// /dev/infiniband/uverbsN for each device and /sys/class/infiniband/DEV.
func buildView(devs []toolkit.LibraryDevice) error {
	// Slave: mounts the host makes later still show here; these do not
	// leave.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making / a slave mount: %w", err)
	}
	if err := addDir("/dev", "infiniband", func(dir string) error {
		for i := range devs {
			p := filepath.Join(dir, "uverbs"+strconv.Itoa(i))
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				return err
			}
			if err := syscall.Mount("/dev/null", p, "", syscall.MS_BIND, ""); err != nil {
				return fmt.Errorf("binding /dev/null on %s: %w", p, err)
			}
		}
		return nil
	}, false); err != nil {
		return err
	}
	return addDir("/sys/class", "infiniband", func(dir string) error {
		for _, d := range devs {
			files := toolkit.IBSysfsFiles(d)
			names := make([]string, 0, len(files))
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				p := filepath.Join(dir, d.Name, n)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p, []byte(files[n]+"\n"), 0o444); err != nil {
					return err
				}
			}
		}
		return nil
	}, true)
}

// addDir makes parent/name a fresh tmpfs that fill populates: over the
// existing directory, or beside parent's entries in a shadow of parent.
// With readOnly the tmpfs is read-only once filled (as sysfs is to a
// program). On failure nothing stays mounted.
func addDir(parent, name string, fill func(dir string) error, readOnly bool) error {
	dir := filepath.Join(parent, name)
	top := dir
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		if err := syscall.Mount("softroce", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
		}
	} else {
		top = parent
		if err := shadow(parent); err != nil {
			return err
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			syscall.Unmount(top, syscall.MNT_DETACH)
			return err
		}
	}
	if err := fill(dir); err != nil {
		syscall.Unmount(top, syscall.MNT_DETACH)
		return fmt.Errorf("%s: %w", dir, err)
	}
	if readOnly {
		if err := syscall.Mount("", top, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			syscall.Unmount(top, syscall.MNT_DETACH)
			return fmt.Errorf("making %s read-only: %w", top, err)
		}
	}
	return nil
}

// shadow mounts a tmpfs on dir holding what dir held: each entry of the
// covered directory bound in place (directories recursively, with the
// mounts below them), symbolic links copied.
func shadow(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	old, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer old.Close()
	src := "/proc/self/fd/" + strconv.Itoa(int(old.Fd()))
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	mode := fmt.Sprintf("mode=%04o", fi.Mode().Perm())
	if err := syscall.Mount("softroce", dir, "tmpfs", 0, mode); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	for _, e := range ents {
		if err := shadowEntry(src, dir, e); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
			return fmt.Errorf("shadowing %s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	return nil
}

func shadowEntry(src, dir string, e fs.DirEntry) error {
	from, to := src+"/"+e.Name(), filepath.Join(dir, e.Name())
	switch {
	case e.Type()&fs.ModeSymlink != 0:
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(target, to)
	case e.IsDir():
		if err := os.Mkdir(to, 0o755); err != nil {
			return err
		}
		return syscall.Mount(from, to, "", syscall.MS_BIND|syscall.MS_REC, "")
	default:
		if err := os.WriteFile(to, nil, 0o600); err != nil {
			return err
		}
		return syscall.Mount(from, to, "", syscall.MS_BIND|syscall.MS_REC, "")
	}
}
