// This file tests that the README stays true: its quick start runs, and its
// environment and configuration tables match New and Config.

package stats

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
)

// TestReadmeQuickStart builds and runs the README's quick start as a user
// would: a module of its own that requires this one, and checks what it
// prints. A README that no longer compiles, or no longer reports to
// statstest, fails here.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\npackage main\n")
	if !ok {
		t.Fatal("README has no ```go block starting with package main")
	}
	block, _, ok = strings.Cut(block, "\n```")
	if !ok {
		t.Fatal("the README's program block is not closed")
	}
	// The README says stats.Example runs the same code: its body, to the
	// line that prints, must be the README's, comments included.
	_, body, _ := strings.Cut(block, "func main() {\n")
	body, _, _ = strings.Cut(body, "\n}")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if body == "" || !strings.Contains(string(example), body+"\n") {
		t.Errorf("stats.Example's body differs from the README's quick start:\n%s", body)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"main.go": "package main\n" + block + "\n",
		"go.mod": "module readme\n\ngo 1.26.0\n\nrequire github.com/spanstats/spanstats v0.0.0\n\n" +
			"replace github.com/spanstats/spanstats => " + root + "\n",
		"go.sum": string(sum),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goTool, "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run of the README program: %v\n%s", err, out)
	}
	if got := string(out); !strings.Contains(got, "counted 10 agent received 10 in 1 group\n") {
		t.Fatalf("the README program printed %q, want its counted and received spans", got)
	}
}

// TestReadmeEnvironment: the README's Environment section names every
// variable New reads, fills each cardinality field from the variable
// EnvCardinalityLimit gives, and names no variable New does not read.
func TestReadmeEnvironment(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### Environment\n")
	if !ok {
		t.Fatal("the README has no Environment section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	// Every exported Env* constant of env.go, so that a new one needs a line.
	read := map[string]bool{}
	f, err := parser.ParseFile(token.NewFileSet(), "env.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, n := range v.Names {
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Env") {
						read[strings.Trim(lit.Value, `"`)] = true
					}
				}
			}
		}
	}
	if !read[EnvRelayURL] || !read[EnvGitCommit] {
		t.Fatalf("read the Env constants of env.go as %v", read)
	}
	limits := reflect.TypeFor[aggregate.Limits]()
	for f := range aggregate.NumFields {
		name := EnvCardinalityLimit(f)
		read[name] = true
		row := "| `" + name + "` | `CardinalityLimits." + limits.Field(int(f)).Name + "` |"
		if !strings.Contains(section, row) {
			t.Errorf("the README's Environment table lacks the row %s", row)
		}
	}
	for name := range read {
		if !strings.Contains(section, "`"+name+"`") && !strings.Contains(section, "`"+name+"=") {
			t.Errorf("the README's Environment section does not name %s", name)
		}
	}
	for _, name := range regexp.MustCompile(`\b(?:DD|SPANSTATS)_[A-Z_]+\b`).FindAllString(section, -1) {
		if !read[name] {
			t.Errorf("the README's Environment section names %s, which New does not read", name)
		}
	}
}

// TestReadmeConfigTable: the README's Configuration table has a row for
// every Config field and names no field Config lacks.
func TestReadmeConfigTable(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "| field | default | meaning |\n|---|---|---|\n")
	if !ok {
		t.Fatal("the README has no Configuration table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	listed := map[string]bool{}
	for row := range strings.SplitSeq(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " |")
		for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(first, -1) {
			listed[m[1]] = true
		}
	}
	config := reflect.TypeFor[Config]()
	for i := range config.NumField() {
		if f := config.Field(i); f.IsExported() && !listed[f.Name] {
			t.Errorf("the README's Configuration table has no row for Config.%s", f.Name)
		}
	}
	for name := range listed {
		if _, ok := config.FieldByName(name); !ok {
			t.Errorf("the README's Configuration table lists %s, which Config does not have", name)
		}
	}
}
