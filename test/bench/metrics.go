package bench

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// metricsClient reads configstamp's metrics endpoint: a scrape that hangs fails (and
// is reported as missing) instead of holding up the sampler or the check.
var metricsClient = &http.Client{Timeout: 5 * time.Second}

// scrape returns the lines of configstamp's Prometheus endpoint.
func scrape(addr string) ([]string, error) {
	resp, err := metricsClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics endpoint %s: %s", addr, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(body), "\n"), nil
}

// Metric reads one value from configstamp's Prometheus endpoint; name includes any
// labels exactly as the endpoint prints them.
func Metric(addr, name string) (float64, error) {
	lines, err := scrape(addr)
	if err != nil {
		return 0, err
	}
	for _, line := range lines {
		if strings.HasPrefix(line, name+" ") {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// MetricSum reads every sample of one metric family (any labels) from configstamp's
// Prometheus endpoint and returns their sum.
func MetricSum(addr, name string) (float64, error) {
	lines, err := scrape(addr)
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, line := range lines {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("metric %s not found", name)
	}
	return sum, nil
}
