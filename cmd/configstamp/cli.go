package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// pluginName is the name kubectl finds the binary under as a plugin.
const pluginName = "kubectl-configstamp"

// pluginCompletionName is the name kubectl runs the binary under to complete the
// plugin's arguments: "kubectl configstamp explain d<TAB>" runs
// "kubectl_complete-configstamp explain d", without cobra's request command.
const pluginCompletionName = "kubectl_complete-configstamp"

// cliCommands are the first arguments that run the command-line tools, not the server:
// the commands, and cobra's hidden ones the shell completion scripts run
// (configstamp __complete explain "").
var cliCommands = []string{"explain", "impact", "hash", "halt", "resume", "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd}

// isCLI reports whether args (os.Args) ask for the command-line tools: the binary runs
// as the kubectl plugin (or its completion), or its first argument is one of
// cliCommands. Anything else is the server, exactly as before.
func isCLI(args []string) bool {
	if len(args) == 0 {
		return false
	}
	return isPlugin(args[0]) || isPluginCompletion(args[0]) || len(args) > 1 && slices.Contains(cliCommands, args[1])
}

// isPlugin reports whether the binary runs under the kubectl plugin's name.
func isPlugin(arg0 string) bool { return baseName(arg0) == pluginName }

// isPluginCompletion reports whether the binary runs under the name kubectl runs to
// complete the plugin's arguments.
func isPluginCompletion(arg0 string) bool { return baseName(arg0) == pluginCompletionName }

// cliArgs are the arguments of the command-line tools given os.Args: run as the
// plugin's completion, a request for completions of the plugin's arguments.
func cliArgs(args []string) []string {
	if isPluginCompletion(args[0]) {
		return append([]string{cobra.ShellCompRequestCmd}, args[1:]...)
	}
	return args[1:]
}

// baseName is the name of the binary of arg0, without a directory or ".exe".
func baseName(arg0 string) string {
	base := filepath.Base(arg0)
	if n := len(base) - len(".exe"); n > 0 && strings.EqualFold(base[n:], ".exe") {
		base = base[:n]
	}
	return base
}

// checkServerFlags parses args as the server would, on a throwaway flag set, and on an
// error prints it to stderr (the server's logger is not set up yet when it parses), with
// a hint when the arguments look meant for the command-line tools. It returns false
// then; --help is left to the server.
func checkServerFlags(args []string, stderr io.Writer) bool {
	fs := serverFlagSet()
	_, err := parseFlags(fs, args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return true
	}
	_, _ = fmt.Fprintln(stderr, "error:", err)
	for _, a := range args {
		if slices.Contains(cliCommands, a) {
			_, _ = fmt.Fprintf(stderr, "The command-line tools take their command first: configstamp %s [flags] (see configstamp help).\n", a)
			return false
		}
	}
	_, _ = fmt.Fprintln(stderr, "Run configstamp --help for the server's flags, or configstamp help for the command-line tools (explain, impact, hash).")
	return false
}

// serverFlagSet is a throwaway flag set for parseFlags (or bindOptions): with the
// flags other packages register on flag.CommandLine (controller-runtime's
// --kubeconfig), which take any value here (they are checked when the server parses).
func serverFlagSet() *flag.FlagSet {
	own := flag.NewFlagSet("probe", flag.ContinueOnError)
	own.SetOutput(io.Discard)
	_ = bindOptions(own)
	fs := flag.NewFlagSet("configstamp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if own.Lookup(f.Name) == nil {
			b, isBool := f.Value.(interface{ IsBoolFlag() bool })
			fs.Var(anyValue{isBool && b.IsBoolFlag()}, f.Name, f.Usage)
		}
	})
	return fs
}

// anyValue accepts any value of a flag (a bool flag when isBool).
type anyValue struct{ isBool bool }

func (anyValue) String() string     { return "" }
func (anyValue) Set(string) error   { return nil }
func (v anyValue) IsBoolFlag() bool { return v.isBool }

// serverUsage is the server's --help: its flags, and the command-line tools.
func serverUsage(fs *flag.FlagSet) func() {
	return func() {
		out := fs.Output()
		_, _ = fmt.Fprintf(out, "Usage: configstamp [flags]: the server (admission webhook and watcher).\n"+
			"       configstamp explain|impact|hash ...: the command-line tools (also as the kubectl plugin kubectl-configstamp); configstamp help tells more.\n\nFlags:\n")
		fs.PrintDefaults()
	}
}

// runCLI runs the command-line tools with args (os.Args[1:]) and returns the exit code.
func runCLI(plugin bool, args []string, stdout, stderr io.Writer) int {
	root := newCLI(plugin, stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// cli holds what the commands share.
type cli struct {
	kube   kubeFlags
	output string
	stdout io.Writer
	stderr io.Writer
}

func newCLI(plugin bool, stdout, stderr io.Writer) *cobra.Command {
	c := &cli{stdout: stdout, stderr: stderr}
	name := "configstamp"
	if plugin {
		name = "kubectl configstamp"
	}
	root := &cobra.Command{
		Use:           name,
		Short:         "Explain why a workload did or didn't roll on a config change",
		Long:          "Explain why a workload did or didn't roll on a config change (explain), which workloads a change of a ConfigMap or Secret rolls (impact), and the stamp of manifests computed offline (hash). Run without one of these commands, the configstamp binary is the server.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: name},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	c.kube.bind(root.PersistentFlags())
	// Defined now rather than at Execute, so that "--help --kubeconfig FILE" does not
	// take --kubeconfig for the value of --help.
	root.InitDefaultHelpFlag()
	root.AddCommand(c.explainCmd(), c.impactCmd(), c.hashCmd(),
		c.wavesCmd("halt", "Halt a change of a ConfigMap or Secret rolling in waves: no more workloads roll for it"),
		c.wavesCmd("resume", "Resume a halted change of a ConfigMap or Secret rolling in waves: its failures so far count as passed"))
	if plugin {
		// cobra would write the script for the command's first word, kubectl: sourced,
		// it would replace kubectl's own completion. kubectl completes a plugin itself,
		// running pluginCompletionName (__complete stays).
		root.CompletionOptions.DisableDefaultCmd = true
		root.AddCommand(&cobra.Command{
			Use: "completion", Hidden: true, Args: cobra.ArbitraryArgs,
			RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("kubectl completes its plugins' arguments itself: put this binary on your PATH as %s too (a symlink to it); "+
					"for the configstamp command, run configstamp completion SHELL", pluginCompletionName)
			},
		})
	}
	return root
}

// kubeFlags are kubectl's flags for the cluster, user and namespace (--kubeconfig,
// --context, -n/--namespace, --server, --token, --request-timeout, ...), bound with
// client-go's clientcmd as kubectl binds them (k8s.io/cli-runtime's ConfigFlags wraps
// the same code but would double the binary's size).
type kubeFlags struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	config    clientcmd.ClientConfig
}

func (k *kubeFlags) bind(fs *pflag.FlagSet) {
	k.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&k.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use.")
	clientcmd.BindOverrideFlags(&k.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	k.config = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(k.loading, &k.overrides)
}

// addOutput adds -o/--output.
func (c *cli) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&c.output, "output", "o", "table", "Output format: table, json or yaml.")
	// Checked before anything is read.
	cmd.PreRunE = func(*cobra.Command, []string) error { return c.checkOutput() }
}

// checkOutput validates -o.
func (c *cli) checkOutput() error {
	switch c.output {
	case "", "table", "wide", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: want table, json or yaml", c.output)
}

// print writes v as JSON or YAML, or calls table.
func (c *cli) print(v any, table func(io.Writer) error) error {
	switch c.output {
	case "", "table", "wide":
		return table(c.stdout)
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.stdout, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = c.stdout.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q: want table, json or yaml", c.output)
}

func (c *cli) warn(msg string) { _, _ = fmt.Fprintln(c.stderr, "warning:", msg) }

// note tells something expected, briefly.
func (c *cli) note(msg string) { _, _ = fmt.Fprintln(c.stderr, "note:", msg) }

// namespace is the namespace of -n, or the kubeconfig context's.
func (c *cli) namespace() (string, error) {
	ns, _, err := c.kube.config.Namespace()
	if err != nil {
		return "", fmt.Errorf("read kubeconfig: %w", err)
	}
	return ns, nil
}

// offlineNamespace is the namespace of objects without one in manifests: -n, else the
// kubeconfig context's when a kubeconfig can be read (no cluster needed), else
// "default"; defaulted tells the last.
func (c *cli) offlineNamespace() (ns string, defaulted bool) {
	if n := c.kube.overrides.Context.Namespace; n != "" {
		return n, false
	}
	if n, explicit, err := c.kube.config.Namespace(); err == nil && n != "" && (explicit || n != "default" || c.contextHasNamespace()) {
		return n, false
	}
	return "default", true
}

// contextHasNamespace reports whether the kubeconfig's current context sets a namespace.
func (c *cli) contextHasNamespace() bool {
	raw, err := c.kube.config.RawConfig()
	if err != nil {
		return false
	}
	name := raw.CurrentContext
	if c.kube.overrides.CurrentContext != "" {
		name = c.kube.overrides.CurrentContext
	}
	ctx, ok := raw.Contexts[name]
	return ok && ctx.Namespace != ""
}

// client is a direct (uncached) client of the cluster of the kubeconfig.
func (c *cli) client() (client.Client, error) {
	cfg, err := c.kube.config.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig: %w", err)
	}
	cfg.UserAgent = "configstamp-cli"
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := argo.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("cannot reach the cluster at %s: %w", cfg.Host, err)
	}
	return cl, nil
}

// findKind returns the workload kind a user typed (any of its Names), nil when none.
func findKind(typed string) *workload.Kind {
	for _, k := range workload.All() {
		if slices.Contains(k.Names(), typed) {
			return k
		}
	}
	return nil
}

// kindNames are the workload kinds in lowercase, as completion offers them.
func kindNames() []string {
	var out []string
	for _, k := range workload.All() {
		out = append(out, strings.ToLower(k.Kind))
	}
	return out
}

// splitRef parses "KIND/NAME" (or KIND NAME as two arguments); a group suffix
// (deployment.apps) is accepted.
func splitRef(args []string) (kind, name string, err error) {
	switch len(args) {
	case 1:
		var ok bool
		if kind, name, ok = strings.Cut(args[0], "/"); !ok {
			return "", "", fmt.Errorf("%q: want KIND/NAME", args[0])
		}
	case 2:
		kind, name = args[0], args[1]
	default:
		return "", "", fmt.Errorf("want one KIND/NAME, got %d arguments", len(args))
	}
	kind, _, _ = strings.Cut(strings.ToLower(kind), ".")
	if name == "" {
		return "", "", fmt.Errorf("%q: the name is empty", strings.Join(args, " "))
	}
	return kind, name, nil
}

func parseWorkload(args []string) (*workload.Kind, string, error) {
	kind, name, err := splitRef(args)
	if err != nil {
		return nil, "", err
	}
	k := findKind(kind)
	if k == nil {
		names := kindNames()
		return nil, "", fmt.Errorf("unsupported kind %q: want %s or %s", kind, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	return k, name, nil
}

func parseSource(args []string) (string, string, error) {
	kind, name, err := splitRef(args)
	if err != nil {
		return "", "", err
	}
	for _, k := range stamp.SourceKinds() {
		if slices.Contains(k.Aliases, kind) {
			return k.Name, name, nil
		}
	}
	return "", "", fmt.Errorf("unsupported kind %q: want %s", kind, stamp.SourceNames(""))
}

// sourceNames are the source kinds' names, as impact completes them.
func sourceNames() []string {
	var out []string
	for _, k := range stamp.SourceKinds() {
		out = append(out, k.Name)
	}
	return out
}

func (c *cli) explainCmd() *cobra.Command {
	var sf settingsFlags
	var key string
	var dryRunTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "explain KIND/NAME",
		Short: "Why a workload did or didn't roll, and whether it would roll now",
		Long: "For each ConfigMap and Secret the workload consumes (which keys, and how): the digest in its stamp, the digest of " +
			"the content now (computed with the webhook's code), and whether it would roll now and why; then configstamp's latest " +
			"Events about it. KIND is deployment (deploy), statefulset (sts), daemonset (ds), cronjob (cj), job or rollout. It judges by the server's " +
			"settings, read from configstamp's Deployment (found through the registration, or --install); the server's flags given here win.",
		Example:           "  configstamp explain -n shop deployment/web\n  kubectl configstamp explain deploy/web -o json",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeKinds(kindNames()...),
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		kind, name, err := parseWorkload(args)
		if err != nil {
			return err
		}
		g, o, ns, err := c.cluster(cmd, &sf)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("hash-key") && !cmd.Flags().Changed("secret-hash-key") {
			key = o.hashKey // the install's, if found
		}
		if key != "" {
			ref, err := hashkey.ParseRef(key)
			if err != nil {
				return fmt.Errorf("--hash-key: %w", err)
			}
			g.HashKey = &ref
		}
		g.DryRunTimeout = dryRunTimeout
		r, err := g.Explain(cmd.Context(), kind, ns, name)
		if err != nil {
			return err
		}
		return c.print(r, func(w io.Writer) error { return explain.WriteReport(w, r) })
	}
	sf.bind(cmd)
	cmd.Flags().StringVar(&key, "hash-key", "", "The server's --hash-key (NAMESPACE/NAME of the Secret holding the hash key; default: the install's): when you may read it, digests are computed here. Without it, or if it can't be read, configstamp's webhook computes them for a server-side dry-run create of a copy of the workload (needs create on its kind in the namespace).")
	cmd.Flags().StringVar(&key, "secret-hash-key", "", "Deprecated: use --hash-key.")
	_ = cmd.Flags().MarkDeprecated("secret-hash-key", "use --hash-key")
	cmd.Flags().DurationVar(&dryRunTimeout, "dry-run-timeout", explain.DefaultDryRunTimeout, "How long to wait for the webhook's answer to the server-side dry-run (without a readable hash key).")
	c.addOutput(cmd)
	return cmd
}

// completeKinds completes the first argument, KIND/NAME, with "KIND/" for each of
// kinds (names are not read from the cluster).
func completeKinds(kinds ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 || strings.Contains(toComplete, "/") {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, k := range kinds {
			if strings.HasPrefix(k, toComplete) {
				out = append(out, k+"/")
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// cluster returns the reader of the cluster of the flags with the server's settings
// (sf), those settings, and the namespace.
func (c *cli) cluster(cmd *cobra.Command, sf *settingsFlags) (*explain.Cluster, *options, string, error) {
	ns, err := c.namespace()
	if err != nil {
		return nil, nil, "", err
	}
	cl, err := c.client()
	if err != nil {
		return nil, nil, "", err
	}
	g, o, err := sf.cluster(cmd.Context(), cl, c)
	if err != nil {
		return nil, nil, "", err
	}
	return g, o, ns, nil
}

func (c *cli) impactCmd() *cobra.Command {
	var sf settingsFlags
	var key, hashKey string
	cmd := &cobra.Command{
		Use:   "impact KIND/NAME",
		Short: "Which workloads a change of a ConfigMap or Secret (or of one key) rolls",
		Long: "Lists the workloads of every supported kind in the namespace that consume the ConfigMap or Secret, which keys and " +
			"how, and whether a change of it (with --key, of that key) would roll each. KIND is configmap (cm) or secret. It judges by the " +
			"server's settings, as explain does.",
		Example:           "  configstamp impact -n shop configmap/web-config --key routes.yaml",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeKinds(sourceNames()...),
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		kind, name, err := parseSource(args)
		if err != nil {
			return err
		}
		g, o, ns, err := c.cluster(cmd, &sf)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("hash-key") {
			hashKey = o.hashKey // the install's, if found
		}
		if hashKey != "" {
			ref, err := hashkey.ParseRef(hashKey)
			if err != nil {
				return fmt.Errorf("--hash-key: %w", err)
			}
			g.HashKey = &ref
		}
		r, err := g.Impact(cmd.Context(), workload.All(), kind, ns, name, key)
		if err != nil {
			return err
		}
		return c.print(r, func(w io.Writer) error { return explain.WriteImpact(w, r) })
	}
	sf.bind(cmd)
	cmd.Flags().StringVar(&key, "key", "", "Ask about a change of this key only.")
	cmd.Flags().StringVar(&hashKey, "hash-key", "", "The server's --hash-key (NAMESPACE/NAME of the Secret holding the hash key; default: the install's): when you may read it, a change rolling in waves shows where it stands (docs/waves.md).")
	c.addOutput(cmd)
	return cmd
}

func (c *cli) hashCmd() *cobra.Command {
	var files []string
	var keyFile, oldKeyFile string
	var secrets bool
	var maxSources int
	cmd := &cobra.Command{
		Use:   "hash -f FILE...",
		Short: "The stamp of workloads in manifests, computed offline",
		Long: "Reads manifests (YAML documents or JSON, several per file; - is stdin) and prints, for each Deployment, StatefulSet, " +
			"DaemonSet, CronJob, Job or Rollout in them, the config-hash and sources annotations the webhook would stamp, computed from the " +
			"ConfigMaps (and, with --secrets, Secrets) in the same files (a source not in them is hashed as missing). Every digest is " +
			"keyed with the cluster's hash key (--key-file): without the key, use explain, which asks the webhook.",
		Example: "  helm template ./chart | configstamp hash -f -\n  configstamp hash -f deploy.yaml -f configmaps.yaml -o json",
		Args:    cobra.NoArgs,
	}
	cmd.RunE = func(_ *cobra.Command, _ []string) error {
		if len(files) == 0 {
			return fmt.Errorf("no manifests: give -f FILE (or -f - for stdin)")
		}
		ns, defaulted := c.offlineNamespace()
		if keyFile == "" && oldKeyFile != "" {
			keyFile, secrets = oldKeyFile, true // the deprecated flag turned Secrets on
		}
		if keyFile == "" {
			return errors.New("--key-file is required: every digest is keyed with the cluster's hash key (the data key \"key\" of the server's --hash-key Secret); " +
				"without it, `configstamp explain` shows the digests configstamp's webhook computes")
		}
		var key []byte
		{
			b, err := os.ReadFile(keyFile)
			if err != nil {
				return fmt.Errorf("--key-file: %w", err)
			}
			if key = explain.ReadKey(b); len(key) != hashkey.Size {
				return fmt.Errorf("--key-file %s: holds %d bytes, want the server's key of exactly %d bytes (raw, or base64; one trailing newline is ignored)", keyFile, len(key), hashkey.Size)
			}
		}
		m := explain.Manifests{NamespaceDefaulted: defaulted}
		kinds := workload.All()
		for _, f := range files {
			var r io.Reader = os.Stdin
			if f != "-" {
				fh, err := os.Open(f)
				if err != nil {
					return err
				}
				defer func() { _ = fh.Close() }()
				r = fh
			}
			if err := explain.Decode(r, ns, kinds, &m); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
		if len(m.Workloads) == 0 {
			return fmt.Errorf("no Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout in %s", strings.Join(files, ", "))
		}
		stamps, err := explain.Offline(&m, key, stamp.Options{Secrets: secrets, MaxSources: maxSources})
		if err != nil {
			return err
		}
		for _, st := range stamps {
			if st.NamespaceDefaulted && st.Sources != "" {
				c.warn(fmt.Sprintf("%s/%s: digests are keyed by namespace, and its namespace %q is a default (none in the manifest, no -n, no kubeconfig context namespace): pass -n NAMESPACE", st.Kind, st.Name, ns))
			}
		}
		return c.print(stamps, func(w io.Writer) error { return explain.WriteOffline(w, stamps) })
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "Manifest file (- for stdin); repeat for more. An object without a namespace is in -n's, else the kubeconfig context's (read without contacting the cluster), else default.")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "File holding the cluster's hash key (the data key \"key\" of the server's --hash-key Secret, raw or base64); required.")
	cmd.Flags().BoolVar(&secrets, "secrets", false, "Secrets count (the server's --secrets).")
	cmd.Flags().IntVar(&maxSources, "max-sources", stamp.DefaultMaxSources, "The server's --max-sources: a workload consuming more sources is not stamped.")
	cmd.Flags().StringVar(&oldKeyFile, "secret-hash-key-file", "", "Deprecated: use --key-file (this one also turns --secrets on).")
	_ = cmd.Flags().MarkDeprecated("secret-hash-key-file", "use --key-file (and --secrets)")
	c.addOutput(cmd)
	return cmd
}
