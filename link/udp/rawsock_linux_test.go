package udp

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNewRawSockNoDescriptors: when the process has no descriptor left
// for the wake-up eventfd or the epoll set, newRawSock returns an error
// wrapping EMFILE and closes every descriptor it holds, the socket's too
// (its caller, Listen, has handed it over).
func TestNewRawSockNoDescriptors(t *testing.T) {
	var orig unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &orig)
	for _, tc := range []struct {
		name  string
		spare uint64 // descriptors left above the socket's
		call  string
	}{
		{"eventfd", 0, "eventfd"},
		{"epoll", 1, "epoll_create1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			// The lowest free number: the limit makes it and all above
			// unavailable, but for spare of them.
			free, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				unix.Close(fd)
				t.Fatal(err)
			}
			unix.Close(free)
			lim := unix.Rlimit{Cur: uint64(free) + tc.spare, Max: orig.Max}
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
				unix.Close(fd)
				t.Fatal(err)
			}
			s, err := newRawSock(fd)
			unix.Setrlimit(unix.RLIMIT_NOFILE, &orig)
			if err == nil {
				s.Close()
				t.Fatal("newRawSock succeeded without descriptors to spare")
			}
			var se *os.SyscallError
			if !errors.Is(err, unix.EMFILE) || !errors.As(err, &se) || se.Syscall != tc.call {
				t.Fatalf("error %v, want %s's EMFILE", err, tc.call)
			}
			// Nothing leaked: the socket's number and the ones newRawSock
			// could take (up to the limit) are all closed.
			check := []int{fd}
			for n := free; n < free+int(tc.spare); n++ {
				check = append(check, n)
			}
			for _, n := range check {
				if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
					unix.Close(n)
					t.Fatalf("descriptor %d is open after the failure (the socket is %d)", n, fd)
				}
			}
		})
	}
}
