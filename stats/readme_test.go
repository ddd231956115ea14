package stats

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
