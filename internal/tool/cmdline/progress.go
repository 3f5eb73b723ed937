package cmdline

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// Progress shows a long run's progress on a terminal: every half second,
// on one line it rewrites, the time so far and the frames the adapter's
// engines have sent and received. Where w is not a terminal (a pipe, a
// file, a test) it shows nothing, so that logs hold only the results.
// stop clears the line; calling it again does nothing.
func Progress(w io.Writer, label string, a *ndk.Adapter) (stop func()) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	base := SumStats(a.Stats()) // a daemon's engines count since it started
	go func() {
		defer close(finished)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
				s := StatsSince(SumStats(a.Stats()), base)
				in, out := s.FramesIn, s.FramesOut
				fmt.Fprintf(f, "\r\033[K%s: %s, %d frames sent, %d received", label, time.Since(start).Round(100*time.Millisecond), out, in)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
		})
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// SumStats adds up the engines' counters.
func SumStats(engines []ndk.EngineStats) ndk.EngineStats {
	var s ndk.EngineStats
	for _, e := range engines {
		s.Add(e)
	}
	return s
}

// StatsSince is what each counter of now gained since base.
func StatsSince(now, base ndk.EngineStats) ndk.EngineStats {
	d := now
	dv, bv := reflect.ValueOf(&d).Elem(), reflect.ValueOf(base)
	for i := range dv.NumField() {
		if f := dv.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(f.Uint() - bv.Field(i).Uint())
		}
	}
	return d
}
