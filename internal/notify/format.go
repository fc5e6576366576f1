package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The message formats.
const (
	// FormatCloudEvents is a CloudEvents 1.0 event in structured mode
	// (application/cloudevents+json), for a generic JSON webhook.
	FormatCloudEvents = "cloudevents"
	// FormatSlack is a Slack incoming webhook's {"text": ...} (also taken by Mattermost,
	// Rocket.Chat and Google Chat).
	FormatSlack = "slack"
	// FormatTeams is a Microsoft Teams message with one Adaptive Card attachment, as a
	// Teams workflow ("When a Teams webhook request is received") takes it; the retired
	// Office 365 connectors' MessageCard is not sent.
	FormatTeams = "teams"
)

// Formats are the values of Options.Format.
var Formats = []string{FormatCloudEvents, FormatSlack, FormatTeams}

// format renders a message: its content type and body. id is the message's id.
type format func(m message, source, id string) (contentType string, body []byte, err error)

func formatter(name string) (format, error) {
	switch name {
	case FormatCloudEvents:
		return cloudEvent, nil
	case FormatSlack:
		return slack, nil
	case FormatTeams:
		return teams, nil
	}
	return nil, fmt.Errorf("notification format %q: want one of %s", name, strings.Join(Formats, ", "))
}

// title is a message's first line.
func (m message) title() string {
	n := len(m.events) + m.more
	s := ""
	if n != 1 {
		s = "s"
	}
	what := ""
	if len(m.sources) > 0 {
		what = " after a change of " + strings.Join(m.sources, ", ")
	}
	switch m.kind {
	case Rolled:
		return fmt.Sprintf("configstamp rolled %d workload%s in namespace %s%s", n, s, m.namespace, what)
	case Restamped:
		return fmt.Sprintf("configstamp restamped %d workload%s in namespace %s for the next run%s (nothing started)", n, s, m.namespace, what)
	case HeldMissing:
		return fmt.Sprintf("configstamp held the rollout of %d workload%s in namespace %s: required config is missing", n, s, m.namespace)
	case HeldPaused:
		return fmt.Sprintf("configstamp held the rollout of %d paused workload%s in namespace %s: it rolls once resumed", n, s, m.namespace)
	case Bypassed:
		return fmt.Sprintf("configstamp: the stamp of %d workload%s in namespace %s bypassed its webhook", n, s, m.namespace)
	case Halted:
		return fmt.Sprintf("configstamp: a change rolling in waves halted in namespace %s%s: %d workload%s failed; the workloads not yet rolled keep their config", m.namespace, what, n, s)
	}
	return fmt.Sprintf("configstamp: %s, %d workload%s in namespace %s", m.kind, n, s, m.namespace)
}

// lines are a message's workloads, one a line.
func (m message) lines() []string {
	out := make([]string, 0, len(m.events)+1)
	for _, e := range m.events {
		out = append(out, e.Workload+": "+e.Reason)
	}
	if m.more > 0 {
		out = append(out, fmt.Sprintf("and %d more", m.more))
	}
	return out
}

// text is the whole message as plain text (Slack's mrkdwn lists).
func (m message) text() string {
	var b strings.Builder
	b.WriteString(m.title())
	for _, l := range m.lines() {
		b.WriteString("\n• ")
		b.WriteString(l)
	}
	return b.String()
}

// cloudEventData is the data of a CloudEvent.
type cloudEventData struct {
	Namespace string             `json:"namespace"`
	Sources   []string           `json:"sources,omitempty"`
	Change    string             `json:"change,omitempty"`
	Workloads []cloudEventTarget `json:"workloads"`
	More      int                `json:"more,omitempty"`
	Summary   string             `json:"summary"`
}

type cloudEventTarget struct {
	Workload string `json:"workload"`
	Reason   string `json:"reason"`
}

// cloudEvent is a CloudEvents 1.0 event in structured mode: type
// io.configstamp.<kind>, subject the namespace (and, for a rollout, its sources).
func cloudEvent(m message, source, id string) (string, []byte, error) {
	data := cloudEventData{Namespace: m.namespace, Sources: m.sources, Change: m.change, More: m.more, Summary: m.title(),
		Workloads: make([]cloudEventTarget, 0, len(m.events))}
	for _, e := range m.events {
		data.Workloads = append(data.Workloads, cloudEventTarget{Workload: e.Workload, Reason: e.Reason})
	}
	subject := m.namespace
	if len(m.sources) > 0 {
		subject += "/" + strings.Join(m.sources, ",")
	}
	body, err := json.Marshal(map[string]any{
		"specversion":     "1.0",
		"id":              id,
		"source":          source,
		"type":            "io.configstamp." + string(m.kind),
		"time":            m.time.UTC().Format(time.RFC3339Nano),
		"subject":         subject,
		"datacontenttype": "application/json",
		"data":            data,
	})
	return "application/cloudevents+json", body, err
}

// slack is a Slack incoming webhook's message.
func slack(m message, _, _ string) (string, []byte, error) {
	body, err := json.Marshal(map[string]string{"text": m.text()})
	return "application/json", body, err
}

// teams is a Teams message with one Adaptive Card (version 1.4): the title, then one
// line per workload.
func teams(m message, _, _ string) (string, []byte, error) {
	blocks := []map[string]any{{"type": "TextBlock", "text": m.title(), "weight": "Bolder", "wrap": true}}
	for _, l := range m.lines() {
		blocks = append(blocks, map[string]any{"type": "TextBlock", "text": "- " + l, "wrap": true, "spacing": "None"})
	}
	body, err := json.Marshal(map[string]any{
		"type": "message",
		"attachments": []map[string]any{{
			"contentType": "application/vnd.microsoft.card.adaptive",
			"contentUrl":  nil,
			"content": map[string]any{
				"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
				"type":    "AdaptiveCard",
				"version": "1.4",
				"body":    blocks,
			},
		}},
	})
	return "application/json", body, err
}
