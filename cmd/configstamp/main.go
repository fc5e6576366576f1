// Command configstamp serves the stamping admission webhook and runs the ConfigMap
// watcher in one process.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Exited")
		os.Exit(1)
	}
}
