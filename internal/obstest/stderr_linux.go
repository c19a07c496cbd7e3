package obstest

import (
	"io"
	"os"
	"syscall"
	"testing"
)

// CaptureStderr runs f with the process's file descriptor 2 redirected to
// a pipe and returns what was written to it: what a client library's
// logger, which holds the *os.File of stderr from its init, prints there.
func CaptureStderr(t testing.TB, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	func() {
		// Restored even when f fails the test (runtime.Goexit).
		defer func() {
			if err := syscall.Dup3(saved, 2, 0); err != nil {
				t.Error(err)
			}
			syscall.Close(saved)
			w.Close()
		}()
		f()
	}()
	s := <-out
	r.Close()
	return s
}
