package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// version is set at build time (-ldflags "-X main.version=..." from the Makefile and the
// Dockerfile); otherwise the module version or VCS revision Go recorded, or "dev".
var version = ""

// buildVersion returns the version configstamp reports.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev-" + s.Value[:12]
		}
	}
	return "dev"
}

// versionLine is what --version prints.
func versionLine() string {
	return "configstamp " + buildVersion() + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

var buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "configstamp_build_info",
	Help: "Always 1; the labels say which configstamp runs.",
}, []string{"version", "goversion"})

func init() {
	metrics.Registry.MustRegister(buildInfo)
	buildInfo.WithLabelValues(buildVersion(), runtime.Version()).Set(1)
}
