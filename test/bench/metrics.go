package bench

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Metric reads one value from configstamp's Prometheus endpoint; name includes any
// labels exactly as the endpoint prints them.
func Metric(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}
