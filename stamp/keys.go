// Package stamp is configstamp's pure core: it finds the ConfigMap and Secret keys a pod
// template consumes and hashes their content into the stamp the webhook writes and the
// watcher verifies. It performs no I/O; callers pass a Lookup that reads the sources.
// The table of source kinds (SourceKind) is here because the core needs it (references,
// names in the encoding, keyed digests); the webhook, the watcher and the command read,
// watch and grant each kind as its entry says.
package stamp

// Keys users see, documented in docs/reference/keys.md: keep them stable.
const (
	// InjectLabel on a Namespace opts every workload in it in; on a workload, that one.
	InjectLabel = "configstamp.io/inject"
	// InjectValue is the value of InjectLabel that opts a namespace in.
	InjectValue = "enabled"
	// SkipAnnotation set to "true" on a workload opts that one workload out.
	SkipAnnotation = "configstamp.io/skip"
	// IgnoreAnnotation set to "true" on a ConfigMap or Secret keeps it out of every hash.
	IgnoreAnnotation = "configstamp.io/ignore"
	// HashAnnotation on the pod template holds the hex SHA-256 over all consumed config.
	HashAnnotation = "configstamp.io/config-hash"
	// SourcesAnnotation on the pod template lists a short digest per source, so a diff
	// of two ReplicaSets says which ConfigMap changed.
	SourcesAnnotation = "configstamp.io/sources"
	// RestartedAnnotation on the pod template is set by the webhook when a workload must
	// roll but its template already carries the wanted stamp (its pods, per its record,
	// run other config): a new template is the only way to new pods.
	RestartedAnnotation = "configstamp.io/restarted-at"
	// ObservedAnnotation on a workload's metadata records the config hash its pods are
	// judged to run and the template it was recorded for (see Observed): written by the
	// webhook with every stamp, and by the watcher for a workload whose template cannot
	// say (it predates configstamp, or changed while the webhook was bypassed). Writing
	// metadata rolls nothing.
	ObservedAnnotation = "configstamp.io/observed"
	// ExtraSourcesAnnotation on a workload's metadata names sources its pod spec does not
	// show (mounted by a sidecar injected at pod creation, read through the API):
	// "configmap/a, secret/b". Each counts with all its keys, as optional.
	ExtraSourcesAnnotation = "configstamp.io/extra-sources"
	// ValuesAnnotation on a Flux HelmRelease's metadata records the keyed digest of the
	// values it takes from ConfigMaps and Secrets (spec.valuesFrom) as of configstamp's
	// last reconcile request ("keyfingerprint:hash", the hash as a config hash is made):
	// configstamp requests a reconcile only when it changes, once.
	ValuesAnnotation = "configstamp.io/values-hash"
	// CoverageAnnotation on the MutatingWebhookConfiguration records, as a JSON object,
	// when configstamp began to stamp each workload kind ("deployments", ...) and to
	// count Secrets ("secrets"), on the API server's clock: a workload created before
	// its kind was covered was never stamped for want of coverage, not because the
	// webhook was bypassed.
	CoverageAnnotation = "configstamp.io/covered-since"
	// CoverageSecrets is the key of Secrets in CoverageAnnotation (the others are
	// workload resources).
	CoverageSecrets = "secrets"
)

// IsTrue reports whether an annotation value means "true" (the contract uses "true").
func IsTrue(v string) bool { return v == "true" }
