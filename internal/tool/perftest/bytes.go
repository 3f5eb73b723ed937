package perftest

import (
	"encoding/binary"
	"time"
)

func putBE32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func putBE64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }
func be32(b []byte) uint32       { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64       { return binary.BigEndian.Uint64(b) }

func afterFunc(d time.Duration) <-chan time.Time { return time.After(d) }
