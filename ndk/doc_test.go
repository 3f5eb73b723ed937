package ndk

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPackageDocExampleCompiles type-checks the example in doc.go's
// package comment, wrapped in a function that returns an error, so the
// code a reader copies compiles.
func TestPackageDocExampleCompiles(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(src), "// runs them on a veth pair). In short, a client that sends one message:\n//\n")
	if !ok {
		t.Fatal("doc.go has no package example")
	}
	var body strings.Builder
	for _, line := range strings.Split(after, "\n") {
		code, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			break
		}
		body.WriteString(code + "\n")
	}
	prog := "package example\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\t\"net/netip\"\n\t\"runtime\"\n\n\t\"github.com/ndkxdp/ndkxdp/ndk\"\n)\n\n" +
		"func send(ctx context.Context) error {\n" + body.String() + "}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example.go", prog, 0)
	if err != nil {
		t.Fatalf("doc.go's example does not parse: %v\n%s", err, prog)
	}
	imports := []string{"context", "errors", "fmt", "net/netip", "runtime", "github.com/ndkxdp/ndkxdp/ndk"}
	out, err := exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, imports...)...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	export := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok {
			export[path] = file
		}
	}
	lookup := func(path string) (io.ReadCloser, error) { return os.Open(export[path]) }
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	if _, err := conf.Check("example", fset, []*ast.File{f}, nil); err != nil {
		t.Fatalf("doc.go's example does not compile: %v\n%s", err, prog)
	}
}
