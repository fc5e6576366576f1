package watcher

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoTypedCachedWorkloadReads: no code of the watcher reads a workload kind's objects
// through the manager's cache with a typed object (a Get or List of an object made by
// workload.Kind New or NewList): in a cluster-wide install the cache holds
// workload.Cached for those kinds, and controller-runtime's cache reader refuses them at
// run time ("cache had type *workload.Cached"), which the fake clients of the unit tests
// never show. Such reads go through workloadStore (store.go); live reads (a reader named
// live, or the API reader) are typed and allowed.
func TestNoTypedCachedWorkloadReads(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package")
	}
	exports := exportData(t)
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if e, ok := exports[path]; ok {
			return os.Open(e)
		}
		return nil, errors.New("no export data for " + path)
	})
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
		Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	if _, err := (&types.Config{Importer: imp}).Check("github.com/configstamp/configstamp/watcher", fset, files, info); err != nil {
		t.Fatal(err)
	}
	bad := typedCachedReads(fset, files, info)
	for _, b := range bad {
		t.Errorf("%s: a workload kind read through the cache with a typed object: read it with workloadStore", b)
	}
}

// typedCachedReads are the positions of Get and List calls, outside store.go, on a
// reader not named live (nor the API reader), of an object made by workload.Kind's New
// or NewList (directly, or through a variable assigned one), or of a typed object of a
// compact kind (compactType).
func typedCachedReads(fset *token.FileSet, files []*ast.File, info *types.Info) []string {
	madeByKind := func(e ast.Expr) bool {
		call, ok := ast.Unparen(e).(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "New" && sel.Sel.Name != "NewList" {
			return false
		}
		s := info.Selections[sel]
		return s != nil && types.TypeString(s.Recv(), nil) == "*github.com/configstamp/configstamp/internal/workload.Kind"
	}
	var out []string
	for _, f := range files {
		if filepath.Base(fset.Position(f.Pos()).Filename) == "store.go" {
			continue
		}
		kindObjs := map[types.Object]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
				for i, rhs := range as.Rhs {
					if id, ok := as.Lhs[i].(*ast.Ident); ok && madeByKind(rhs) {
						if o := info.Defs[id]; o != nil {
							kindObjs[o] = true
						} else if o := info.Uses[id]; o != nil {
							kindObjs[o] = true
						}
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			arg := -1
			switch sel.Sel.Name {
			case "Get":
				arg = 2
			case "List":
				arg = 1
			}
			if arg < 0 || len(call.Args) <= arg {
				return true
			}
			reader := types.ExprString(sel.X)
			if strings.Contains(strings.ToLower(reader), "live") || strings.Contains(reader, "APIReader") {
				return true
			}
			a := call.Args[arg]
			if id, ok := ast.Unparen(a).(*ast.Ident); (ok && kindObjs[info.Uses[id]]) || madeByKind(a) || compactType(info.TypeOf(a)) {
				out = append(out, fset.Position(call.Pos()).String())
			}
			return true
		})
	}
	return out
}

// compactType reports whether t is a typed object or list of a kind the cache may hold
// as workload.Cached (&appsv1.Deployment{} and the like, not made by workload.Kind).
func compactType(t types.Type) bool {
	if t == nil {
		return false
	}
	switch types.TypeString(t, nil) {
	case "*k8s.io/api/apps/v1.Deployment", "*k8s.io/api/apps/v1.StatefulSet", "*k8s.io/api/apps/v1.DaemonSet",
		"*k8s.io/api/apps/v1.DeploymentList", "*k8s.io/api/apps/v1.StatefulSetList", "*k8s.io/api/apps/v1.DaemonSetList":
		return true
	}
	return false
}

// exportData maps the import path of every dependency of the package to its compiled
// export data (go list builds it, from the build cache when warm).
func exportData(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export", ".")
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	out := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		out[p.ImportPath] = p.Export
	}
	return out
}
