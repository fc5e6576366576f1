// Package promtext reads a Prometheus text endpoint (configstamp's /metrics) in the
// tests: every series by its full name, labels as printed, to its value.
package promtext

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Scrape reads http://addr/metrics through hc into "name{labels}" -> value; comment
// lines and lines without a value are skipped.
func Scrape(hc *http.Client, addr string) (map[string]float64, error) {
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// MustScrape is Scrape with the default HTTP client, failing the test when the endpoint
// cannot be read.
func MustScrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	m, err := Scrape(http.DefaultClient, addr)
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	return m
}

// WithFamilies adds to m every family (a series' name without its labels) as the sum
// of its series, and returns m.
func WithFamilies(m map[string]float64) map[string]float64 {
	sums := map[string]float64{}
	for series, v := range m {
		if j := strings.IndexByte(series, '{'); j > 0 {
			sums[series[:j]] += v
		}
	}
	for name, v := range sums {
		m[name] += v
	}
	return m
}
