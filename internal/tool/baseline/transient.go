package baseline

import (
	"errors"

	"golang.org/x/sys/unix"
)

// isTransient reports send errors that mean "queue full, try again".
func isTransient(err error) bool {
	return errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN)
}
