package main

import (
	"bytes"
	"os"
	"testing"
)

// TestGeneratedIsCurrent: ndk/stats_gen.go is what gen writes from
// counters.Engine now; after a counter is added, `go generate ./ndk`
// brings it up to date.
func TestGeneratedIsCurrent(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../stats_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("ndk/stats_gen.go is not what counters.Engine gives: run go generate ./ndk")
	}
}
