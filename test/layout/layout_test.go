package layout

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/ndkxdp/ndkxdp"

// room is a row of the README's layout table: the directories it names
// and the module paths their packages may import.
type room struct {
	dirs     []string
	allowed  []string // a path, or a subtree as "path/..."
	anything bool     // "anything above": test rooms
}

// expand applies one level of brace expansion per pair: "a/{b,c}" is
// "a/b" and "a/c".
func expand(p string) []string {
	i := strings.Index(p, "{")
	j := strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{strings.TrimSuffix(p, "/")}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, expand(p[:i]+alt+p[j+1:])...)
	}
	return out
}

// quoted returns the `backticked` parts of s.
func quoted(s string) []string {
	var out []string
	for parts := strings.Split(s, "`"); len(parts) > 2; parts = parts[2:] {
		out = append(out, parts[1])
	}
	return out
}

// parseTable reads the layout table: the first column's backticked
// directories; the last column's backticked paths before the word
// "never", "nothing", or "anything".
func parseTable(t *testing.T, r io.Reader) []room {
	var rooms []room
	in := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| Directory |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(rooms) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("layout row without three columns: %q", line)
		}
		var rm room
		for _, d := range quoted(cells[1]) {
			rm.dirs = append(rm.dirs, expand(d)...)
		}
		may := cells[len(cells)-2]
		if i := strings.Index(may, "never"); i >= 0 {
			may = may[:i]
		}
		rm.anything = strings.Contains(may, "anything")
		for _, p := range quoted(may) {
			rm.allowed = append(rm.allowed, expand(p)...)
		}
		if len(rm.dirs) == 0 {
			t.Fatalf("layout row names no directory: %q", line)
		}
		rooms = append(rooms, rm)
	}
	if len(rooms) == 0 {
		t.Fatal("README.md has no layout table (| Directory | ...)")
	}
	return rooms
}

func within(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// roomOf is the room whose directory is the longest prefix of pkg.
func roomOf(rooms []room, pkg string) (room, string, bool) {
	var best room
	bestDir, ok := "", false
	for _, r := range rooms {
		for _, d := range r.dirs {
			if within(pkg, d) && len(d) >= len(bestDir) {
				best, bestDir, ok = r, d, true
			}
		}
	}
	return best, bestDir, ok
}

func (r room) admits(dir, imp string) bool {
	if within(imp, dir) {
		return true // a room's own packages (porttest imports port)
	}
	for _, a := range r.allowed {
		if sub, ok := strings.CutSuffix(a, "/..."); ok {
			if within(imp, sub) {
				return true
			}
		} else if imp == a {
			return true
		}
	}
	return false
}

// TestImportsFollowTheLayoutTable: every package of the module has a row
// in the README's layout table, and imports from the module only what its
// row allows (its own room's packages aside; tests' own imports are not
// counted).
func TestImportsFollowTheLayoutTable(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rooms := parseTable(t, f)

	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		r, dir, ok := roomOf(rooms, pkg)
		if !ok {
			t.Errorf("%s has no row in README.md's layout table", pkg)
			continue
		}
		n++
		if r.anything {
			continue
		}
		for _, imp := range p.Imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue // the standard library and other modules
			}
			if !r.admits(dir, rel) {
				t.Errorf("%s imports %s, which its row (%s) does not allow", pkg, rel, dir)
			}
		}
	}
	if n < 20 {
		t.Fatalf("checked %d packages: go list or the table parse found too few", n)
	}
}

// TestTableParse: the rules the table is read by.
func TestTableParse(t *testing.T) {
	rooms := parseTable(t, strings.NewReader("| Directory | What | May import |\n|---|---|---|\n"+
		"| `a/` | x | `b/{c,d}`, `e/...`; never `f` |\n"+
		"| `a/z/`, `g` | y | nothing |\n"+
		"| `t/` | z | anything above |\n"))
	r, dir, _ := roomOf(rooms, "a/q")
	for imp, want := range map[string]bool{"b/c": true, "b/d": true, "e": true, "e/x/y": true, "f": false, "b": false, "a/k": true} {
		if got := r.admits(dir, imp); got != want {
			t.Errorf("a/q importing %s: %v, want %v", imp, got, want)
		}
	}
	if r, _, _ := roomOf(rooms, "a/z/w"); len(r.allowed) != 0 || r.anything {
		t.Errorf("a/z/w's room: %+v, want the nothing row", r)
	}
	if r, _, _ := roomOf(rooms, "t/u"); !r.anything {
		t.Error("t/u: want anything")
	}
	if _, _, ok := roomOf(rooms, "h"); ok {
		t.Error("h has no row but was given one")
	}
}
