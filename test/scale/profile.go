package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// profileDir, when set (-profile DIR), receives CPU profiles of configstamp and of
// kube-apiserver taken during the admission measurement, and heap profiles of each
// role's process in memory-workloads.
var profileDir string

// profile waits for configstamp's pprof endpoint, then takes both CPU profiles at once.
func profile(ctx context.Context, env *framework.Env, d time.Duration) {
	if err := waitFor(time.Minute, "pprof endpoint", func() (bool, error) {
		resp, err := http.Get("http://127.0.0.1:6060/debug/pprof/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil, err
	}); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return
	}
	time.Sleep(3 * time.Second) // into the measurement
	takeProfiles(ctx, env, d, filepath.Join(profileDir, "configstamp.pprof"), filepath.Join(profileDir, "kube-apiserver.pprof"))
}

// takeProfiles takes CPU profiles of configstamp (its pprof endpoint on 127.0.0.1:6060)
// and of kube-apiserver at once, for d, into the two files.
func takeProfiles(ctx context.Context, env *framework.Env, d time.Duration, configstampFile, apiserverFile string) {
	secs := fmt.Sprint(int(d.Seconds()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:6060/debug/pprof/profile?seconds="+secs, nil)
		if err != nil {
			return
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			save(resp.Body, configstampFile)
			resp.Body.Close()
		}
	}()
	tr, err := rest.TransportFor(env.Cluster.Config)
	if err == nil {
		hc := &http.Client{Transport: tr}
		if resp, err := hc.Get(env.Cluster.URL + "/debug/pprof/profile?seconds=" + secs); err == nil {
			save(resp.Body, apiserverFile)
			resp.Body.Close()
		}
	}
	<-done
}

// save writes r to path, making its directory first; a failure is printed, not fatal.
func save(r io.Reader, path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Printf("  profile %s not saved: %v\n", path, err)
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Printf("  profile %s not saved: %v\n", path, err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, r)
}

// pprofArgs, with -profile, appends to args the flag that serves configstamp's pprof
// endpoints on a free loopback port and returns that address; "" without -profile.
func pprofArgs(args *[]string) string {
	if profileDir == "" {
		return ""
	}
	port, err := cluster.FreePort()
	if err != nil {
		fail(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	*args = append(*args, "--pprof-bind-address", addr)
	return addr
}

// heapProfile saves the heap profile of the process serving pprof at addr into path
// (after a collection, so in-use figures are of live objects).
func heapProfile(ctx context.Context, addr, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
		return
	}
	defer resp.Body.Close()
	save(resp.Body, path)
}
