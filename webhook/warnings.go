package webhook

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/configstamp/configstamp/stamp"
)

// The warnings the webhook answers with, for the client that made the request (the
// unread one, which the watcher reads, is stamp.UnreadWarning).

const panicWarning = "configstamp: not stamped: internal error (a bug; see configstamp's log)"

func undecodableWarning(problem string) string {
	return "configstamp: not stamped: its pod template does not decode as a pod template: " + problem
}

func extraSourcesWarning(problems []string) string {
	return "configstamp: ignored entries of " + stamp.ExtraSourcesAnnotation + ": " + strings.Join(problems, "; ")
}

func heldWarning(unmet []string) string {
	return "configstamp: kept the stored config hash, not rolling into missing config: " + strings.Join(unmet, "; ")
}

func tooLargeWarning(kind string) string {
	return fmt.Sprintf("configstamp: not stamped: its stamp would take the %s's pod template annotations past the API server's limit of %d bytes; it will not roll on config changes until they are smaller",
		kind, stamp.AnnotationSizeLimit)
}

func tooManySourcesWarning(kind string, n, capacity int) string {
	return fmt.Sprintf("configstamp: not stamped: the %s consumes %d ConfigMaps and Secrets, more than configstamp's cap of %d (--max-sources); its stamp is left as it was and it will not roll on config changes",
		kind, n, capacity)
}

// scopeUnknownWarning answers a review whose namespace configstamp cannot place yet.
const scopeUnknownWarning = stamp.WarningScopeUnknown + " (its namespace cache is not ready, or does not know the namespace yet); the watcher checks it later"

func noRecordWarning(kind string) string {
	return fmt.Sprintf("configstamp: stamped without its record of the config the pods run: the %s's annotations are near the API server's limit of %d bytes",
		kind, stamp.AnnotationSizeLimit)
}

func missingWarning(unmet []string) string {
	return "configstamp: required config is missing, the new pods cannot start until it exists: " + strings.Join(unmet, "; ")
}

// passable makes each warning one the API server passes on: it drops a warning that is
// not valid UTF-8 or holds control characters (an error's text may).
func passable(warnings []string) []string {
	clean := make([]string, len(warnings))
	for i, w := range warnings {
		clean[i] = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return ' '
			}
			return r
		}, strings.ToValidUTF8(w, "?"))
	}
	return clean
}
