package ndkverbs

import (
	"errors"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestCompletionErrors pins how failed ndk completions map to the verbs
// sentinels the tools test for.
func TestCompletionErrors(t *testing.T) {
	tests := []struct {
		status   ndk.Status
		provider uint32
		want     error
	}{
		{ndk.StatusCancelled, 5, verbs.ErrFlushed},
		{ndk.StatusAccessViolation, 10, verbs.ErrAccess},
		{ndk.StatusIOTimeout, 12, verbs.ErrRetryExceeded},
		{ndk.StatusBufferOverflow, 1, verbs.ErrTooLong},
	}
	all := []error{verbs.ErrFlushed, verbs.ErrAccess, verbs.ErrRetryExceeded, verbs.ErrTooLong}
	for _, tt := range tests {
		r := &ndk.ResultEx{ProviderErrorCode: tt.provider}
		r.Status = tt.status
		err := completionErr(r)
		for _, e := range all {
			if errors.Is(err, e) != (e == tt.want) {
				t.Errorf("%v (ib_wc_status %d) -> %v: errors.Is(%v) = %v", tt.status, tt.provider, err, e, errors.Is(err, e))
			}
		}
	}
	// RNR retries exhausted (IB_WC_RNR_RETRY_EXC_ERR) is not a transport
	// retry: none of the sentinels.
	r := &ndk.ResultEx{ProviderErrorCode: 13}
	r.Status = ndk.StatusIOTimeout
	if err := completionErr(r); err == nil || errors.Is(err, verbs.ErrRetryExceeded) {
		t.Errorf("RNR retry exceeded -> %v", err)
	}
}
