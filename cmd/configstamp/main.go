// Command configstamp serves the stamping admission webhook and runs the ConfigMap
// watcher in one process. Run as kubectl-configstamp (or kubectl_complete-configstamp,
// kubectl's completion of the plugin), or with explain, impact, hash, help, completion
// or cobra's __complete as its first argument, it is the command-line tool that
// explains rollouts instead.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	if isCLI(os.Args) {
		os.Exit(runCLI(isPlugin(os.Args[0]) || isPluginCompletion(os.Args[0]), cliArgs(os.Args), os.Stdout, os.Stderr))
	}
	flag.CommandLine.Usage = serverUsage(flag.CommandLine)
	if !checkServerFlags(os.Args[1:], os.Stderr) {
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Exited")
		os.Exit(1)
	}
}
