// Package events finds the Events configstamp records on workloads, for the tests.
package events

import (
	"context"
	"fmt"
	"strings"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Find looks in ns for an Event (events.k8s.io/v1) of reason about the object name
// whose note contains contains (any note when empty); the error says what it saw.
func Find(c client.Client, ns, name, reason, contains string) error {
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, contains) {
			return nil
		}
	}
	if contains == "" {
		return fmt.Errorf("no %s event on %s among %d events", reason, name, len(list.Items))
	}
	return fmt.Errorf("no %s event on %s mentioning %q among %d events", reason, name, contains, len(list.Items))
}
