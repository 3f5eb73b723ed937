package ndk

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// TestOneSeam: outside the providers' files (inproc_*.go; daemon_*.go,
// dial.go and events.go) and the daemon's own seam (hooks.go), package
// ndk names no provider's type: its objects call their backend
// (backend.go) and never ask which provider it is. The one exception is
// newAdapter, which makes every adapter in process until Dial hands it to
// the daemon.
func TestOneSeam(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "inproc_") || strings.HasPrefix(name, "daemon_") ||
			name == "dial.go" || name == "events.go" || name == "hooks.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "newAdapter" && name == "adapter.go" {
				return false
			}
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			for _, p := range []string{"daemon", "inproc"} {
				if rest, ok := strings.CutPrefix(id.Name, p); ok && rest != "" && unicode.IsUpper(rune(rest[0])) {
					t.Errorf("%s: %s names a provider's type outside the provider's files", fset.Position(id.Pos()), id.Name)
				}
			}
			return true
		})
	}
	if checked < 20 {
		t.Fatalf("checked %d files; the glob found too few", checked)
	}
}
