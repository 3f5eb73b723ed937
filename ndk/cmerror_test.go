package ndk

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestCMError pins how an error of package cm reaches an ndk caller: one
// *Error named for the ndk call, with cm's status, detail and cause.
func TestCMError(t *testing.T) {
	rej := &cm.RejectError{Reason: rocev2.RejConsumerDefined}
	for _, tc := range []struct {
		name     string
		in       error
		status   Status
		detail   string
		wantText string
	}{
		{"same op", &Error{Status: StatusConnectionRefused, Op: "connect", Detail: "peer rejected", Err: rej},
			StatusConnectionRefused, "peer rejected", "ndk: connect: peer rejected (STATUS_CONNECTION_REFUSED): " + rej.Error()},
		{"other op", &Error{Status: StatusNetworkUnreachable, Op: "resolve", Detail: "no route"},
			StatusNetworkUnreachable, "resolve: no route", "ndk: connect: resolve: no route (STATUS_NETWORK_UNREACHABLE)"},
		{"other op, no detail", &Error{Status: StatusCancelled, Op: "resolve"},
			StatusCancelled, "resolve", "ndk: connect: resolve (STATUS_CANCELLED)"},
		{"not an *Error", fmt.Errorf("plain"), StatusUnsuccessful, "", "ndk: connect: (STATUS_UNSUCCESSFUL): plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cmError("connect", tc.in)
			var e *Error
			if !errors.As(err, &e) || e.Op != "connect" || e.Status != tc.status || e.Detail != tc.detail {
				t.Fatalf("cmError = %#v, want op connect, status %v, detail %q", err, tc.status, tc.detail)
			}
			if !errors.Is(err, &Error{Status: tc.status}) {
				t.Errorf("errors.Is(err, sentinel of %v) = false", tc.status)
			}
			if got := err.Error(); got != tc.wantText {
				t.Errorf("text %q, want %q", got, tc.wantText)
			}
		})
	}
	var r *cm.RejectError
	if !errors.As(cmError("connect", &Error{Status: StatusConnectionRefused, Op: "connect", Err: rej}), &r) || r != rej {
		t.Error("the REJ cause is lost")
	}
	if cmError("connect", nil) != nil {
		t.Error("cmError(nil) != nil")
	}
}
