package cm

import (
	"fmt"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// RejectError is the cause of a CONNECTION_REFUSED or CONNECTION_ABORTED
// that a peer's REJ produced: its reason and private data (IBTA table 108).
type RejectError struct {
	Reason      rocev2.RejectReason
	PrivateData []byte // the REJ's 148 private-data bytes
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("peer sent REJ reason %d (%v)", e.Reason, e.Reason)
}
