package verbs

import "github.com/ndkxdp/ndkxdp/internal/spin"

// SetQuiet makes every Backoff see its Yielder as quiet, or never, until
// the returned restore is called.
func SetQuiet(q bool) (restore func()) {
	saved := quiet
	quiet = func(*spin.Yielder) bool { return q }
	return func() { quiet = saved }
}
