package port_test

import (
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
)

// The Pipe's run of the lost-wake-up check stays beside the XSK's: the
// check is this package's (XSK's tests need it and cannot import porttest).
func TestPipeNoLostWakeups(t *testing.T) {
	p, err := porttest.NewPipe(porttest.PipeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	port.CheckNoLostWakeups(t, p.B(), 5000)
}
