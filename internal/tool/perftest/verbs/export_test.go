package verbs

import "github.com/ndkxdp/ndkxdp/internal/spin"

// SetQuiet makes every Backoff see its Yielder as quiet, or never, until
// the returned restore is called.
func SetQuiet(q bool) (restore func()) {
	saved := quiet
	quiet = func(*spin.Yielder) bool { return q }
	return func() { quiet = saved }
}

// SetSlowYields makes every Backoff's thread yields report slow, or
// never, until the returned restore is called.
func SetSlowYields(slow bool) (restore func()) {
	saved := yieldThread
	yieldThread = func(y *spin.Yielder) bool { y.YieldP(); return slow }
	return func() { yieldThread = saved }
}
