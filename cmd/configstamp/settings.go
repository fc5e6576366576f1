package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/webhook"
)

// explain and impact judge by the server's settings, read from the install: the
// registration names its Service, the Service selects configstamp's pods, and the
// Deployment in the Service's namespace whose pods those are runs the container
// configstamp, whose args the server's own parser (bindOptions) reads. The server's
// flags given to the command win over those.

// containerName is the chart's name of configstamp's container.
const containerName = "configstamp"

// settingFlags are the server's flags explain and impact judge by, which they take under
// the same names.
var settingFlags = []string{"namespace-label", "exclude-namespaces", "watch-namespaces", "coverage-configmap",
	"max-sources", "secrets", "csi-secrets", "roll-stale-at-install", "registration-name",
	"waves", "waves-threshold"}

// settingsFlags are the command's flags of the server's settings.
type settingsFlags struct {
	install string
	flags   *pflag.FlagSet
}

// bind adds settingFlags, as the server defines them, and --install to cmd.
func (s *settingsFlags) bind(cmd *cobra.Command) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	_ = bindOptions(fs)
	for _, name := range settingFlags {
		pf := pflag.PFlagFromGoFlag(fs.Lookup(name))
		pf.Usage = "The server's --" + name + ", when not the install's (read from its Deployment): " + pf.Usage
		pf.Value = &given{Value: pf.Value}
		cmd.Flags().AddFlag(pf)
	}
	cmd.Flags().StringVar(&s.install, "install", "", "NAMESPACE/NAME of configstamp's Deployment, whose container's args are the server's settings (default: the Deployment the registration's Service selects).")
	s.flags = cmd.Flags()
}

// given is a flag's value that says what it was given (a flag.Func's says nothing),
// so parseSettings can pass it on to the server's parser.
type given struct {
	pflag.Value
	set string
}

func (g *given) Set(v string) error {
	g.set = v
	return g.Value.Set(v)
}

func (g *given) String() string {
	if g.set != "" {
		return g.set
	}
	return g.Value.String()
}

// found is an install's Deployment and what was read on the way.
type found struct {
	// deployment is the Deployment the settings are read from ("": none).
	deployment string
	args       []string
	// registration is the registration read (nil: not read).
	registration *admissionregistrationv1.MutatingWebhookConfiguration
	// problem says why no settings were read; dev: the registration is dev mode's.
	problem string
	dev     bool
}

// locate finds configstamp's Deployment: --install's, else through the registration
// (its name given, or the chart's, else dev mode's).
func (s *settingsFlags) locate(ctx context.Context, cl client.Client) (found, error) {
	if s.install != "" {
		ref, err := parseRef("--install", s.install)
		if err != nil {
			return found{}, err
		}
		var d appsv1.Deployment
		if err := cl.Get(ctx, ref, &d); err != nil {
			return found{}, fmt.Errorf("--install: read deployment %s: %w", ref, err)
		}
		args, ok := containerArgs(&d)
		if !ok {
			return found{}, fmt.Errorf("--install: deployment %s has no container named %s", ref, containerName)
		}
		return found{deployment: ref.String(), args: args}, nil
	}
	name := s.flags.Lookup("registration-name").Value.String()
	reg, err := s.registration(ctx, cl, name)
	if err != nil {
		return found{problem: err.Error()}, nil
	}
	f := found{registration: reg}
	svc := service(reg)
	if svc == nil {
		f.problem, f.dev = "registration "+reg.Name+" calls a URL, not a Service (dev mode)", true
		return f, nil
	}
	var sv corev1.Service
	if err := cl.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, &sv); err != nil {
		f.problem = fmt.Sprintf("cannot read service %s/%s of registration %s: %v", svc.Namespace, svc.Name, reg.Name, apierrors.ReasonForError(err))
		return f, nil
	}
	var deps appsv1.DeploymentList
	if err := cl.List(ctx, &deps, client.InNamespace(sv.Namespace)); err != nil {
		f.problem = fmt.Sprintf("cannot list deployments in namespace %s: %v", sv.Namespace, apierrors.ReasonForError(err))
		return f, nil
	}
	d, problem := selected(&sv, deps.Items)
	if d == nil {
		f.problem = problem
		return f, nil
	}
	f.deployment = d.Namespace + "/" + d.Name
	f.args, _ = containerArgs(d)
	return f, nil
}

// registration reads the registration name; if it is the default and does not exist,
// dev mode's.
func (s *settingsFlags) registration(ctx context.Context, cl client.Client, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	names := []string{name}
	if !s.flags.Changed("registration-name") {
		names = append(names, webhook.DevConfigurationName)
	}
	for _, n := range names {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		err := cl.Get(ctx, client.ObjectKey{Name: n}, &reg)
		if err == nil {
			return &reg, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cannot read registration %s: %v", n, apierrors.ReasonForError(err))
		}
	}
	return nil, fmt.Errorf("no registration %s (MutatingWebhookConfiguration; --registration-name)", name)
}

// service is the Service the registration's entries call (the first that names one).
func service(reg *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.ServiceReference {
	for _, w := range reg.Webhooks {
		if w.ClientConfig.Service != nil {
			return w.ClientConfig.Service
		}
	}
	return nil
}

// selected is the one Deployment of deps (listed in svc's namespace) whose pods svc
// selects and that runs configstamp's container; nil and why when there is none, or more
// than one. A Deployment in another namespace is never one (a tenant's look-alike).
func selected(svc *corev1.Service, deps []appsv1.Deployment) (*appsv1.Deployment, string) {
	if len(svc.Spec.Selector) == 0 {
		return nil, fmt.Sprintf("service %s/%s selects no pods", svc.Namespace, svc.Name)
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var out []*appsv1.Deployment
	var names []string
	for i := range deps {
		d := &deps[i]
		if _, ok := containerArgs(d); ok && d.Namespace == svc.Namespace && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
			names = append(names, d.Name)
		}
	}
	switch len(out) {
	case 0:
		return nil, fmt.Sprintf("no deployment in namespace %s runs pods that service %s selects with a container %s", svc.Namespace, svc.Name, containerName)
	case 1:
		return out[0], ""
	}
	return nil, fmt.Sprintf("several deployments in namespace %s run pods that service %s selects (%s): pass --install", svc.Namespace, svc.Name, strings.Join(names, ", "))
}

// containerArgs are the arguments of d's configstamp container (its command past the
// binary, then its args); false when it has none.
func containerArgs(d *appsv1.Deployment) ([]string, bool) {
	i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == containerName })
	if i < 0 {
		return nil, false
	}
	c := d.Spec.Template.Spec.Containers[i]
	var args []string
	if len(c.Command) > 1 {
		args = append(args, c.Command[1:]...)
	}
	return append(args, c.Args...), true
}

// parseSettings parses args with the server's parser, then sets the server's flags
// explicit gives (those changed): they win. An install's args it cannot parse are
// reported as problem, and the defaults taken instead.
func parseSettings(args []string, explicit *pflag.FlagSet) (o *options, problem string, err error) {
	fs := serverFlagSet()
	o = bindOptions(fs)
	if perr := fs.Parse(args); perr != nil {
		problem = "cannot parse the server's args: " + perr.Error()
		fs = serverFlagSet()
		o = bindOptions(fs)
	}
	explicit.Visit(func(pf *pflag.Flag) {
		if err == nil && slices.Contains(settingFlags, pf.Name) {
			if serr := fs.Set(pf.Name, pf.Value.String()); serr != nil {
				err = fmt.Errorf("--%s: %w", pf.Name, serr)
			}
		}
	})
	return o, problem, err
}

// cluster is the reader of the cluster with the server's settings: discovered, or the
// defaults with one warning (a brief note in dev mode, where that is expected); the
// flags given win either way.
func (s *settingsFlags) cluster(ctx context.Context, cl client.Client, c *cli) (*explain.Cluster, *options, error) {
	f, err := s.locate(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	o, problem, err := parseSettings(f.args, s.flags)
	if err != nil {
		return nil, nil, err
	}
	if problem != "" {
		f.problem = fmt.Sprintf("deployment %s: %s", f.deployment, problem)
	}
	switch {
	case f.dev:
		c.note(f.problem + ": judging by the server's defaults and the flags given")
	case f.problem != "":
		c.warn("the server's settings are unverified (" + f.problem + "): judging by its defaults and the flags given (pass --install NAMESPACE/NAME, or the server's flags)")
	}
	if o.watchNamespaces != "" && o.coverageConfigMap == "" {
		return nil, nil, errors.New("--watch-namespaces needs --coverage-configmap NAMESPACE/NAME (the server's)")
	}
	sc, err := scope.NewWatched(o.namespaceLabel, strings.Split(o.excludeNamespaces, ","), o.watched())
	if err != nil {
		return nil, nil, err
	}
	g := &explain.Cluster{Client: cl, Scope: sc, Secrets: o.secrets, CSISecrets: o.csiSecrets, MaxSources: o.bounds.maxSources, RollStale: o.rollStaleAtInstall,
		Waves: o.waves, SecretsSet: s.flags.Changed("secrets"), SecretsFound: f.problem == "", Registration: o.registrationName,
		RegistrationRead: f.registration, RegistrationReported: f.registration == nil && s.install == "", Warn: c.warn}
	if f.dev {
		// Coverage is read from the chart's registration, as before; dev mode's
		// registration is not a chart's, and its absence was noted already.
		g.RegistrationRead, g.RegistrationReported = nil, true
	}
	if o.watchNamespaces != "" {
		if g.CoverageConfigMap, err = parseRef("--coverage-configmap", o.coverageConfigMap); err != nil {
			return nil, nil, err
		}
	}
	return g, o, nil
}
