// Package promtext reads a member's /metrics, Prometheus's text format,
// with the Prometheus project's own parser, so that escaping, timestamps,
// exponents and label syntax are read as Prometheus reads them.
package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads an exposition and returns the value of every unlabelled
// counter, gauge and untyped sample, by metric name, and of every
// unlabelled summary's and histogram's NAME_sum and NAME_count, as the
// exposition names them. Labelled samples, quantiles and buckets are left
// out: the callers read single values.
func Parse(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[name] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				out[name] = m.GetUntyped().GetValue()
			case dto.MetricType_SUMMARY:
				out[name+"_sum"], out[name+"_count"] = m.GetSummary().GetSampleSum(), float64(m.GetSummary().GetSampleCount())
			case dto.MetricType_HISTOGRAM:
				out[name+"_sum"], out[name+"_count"] = m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out, nil
}

// Fetch GETs url (a /metrics endpoint) and parses it.
func Fetch(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}
