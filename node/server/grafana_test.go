package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/server"
)

// dashboard is the part of a Grafana dashboard model an import reads.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Inputs        []struct {
		Name, Type, PluginID string
	} `json:"__inputs"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos *struct {
			X, Y, W, H int
		} `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// The Grafana dashboard in deploy/ imports (the model Grafana expects: a
// title, a uid, a schema version, a Prometheus data source input, panels
// with unique ids, a place and queries) and queries only what a member
// exports: every raftlock_ metric, and every label its queries group or
// select by. A renamed metric must not leave an empty panel behind.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "raftlock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("deploy/grafana/raftlock.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("not a dashboard model: title %q uid %q schemaVersion %d, %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Fatalf("inputs %+v: want one Prometheus data source to choose at import", d.Inputs)
	}

	// A member that served a call of each kind exports every family.
	n := oneMember(t)
	s := server.New(n)
	ctx := context.Background()
	s.Handle(ctx, &wire.Request{ID: 1, Op: wire.OpAcquire, Key: "k", LeaseMS: 1000})
	s.Handle(ctx, &wire.Request{ID: 2, Op: wire.OpGet, Key: "k"})
	families, err := n.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{} // exported name (histograms: _bucket too) -> its labels
	for _, mf := range families {
		var names []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
		}
		labels[mf.GetName()] = names
		if mf.GetType().String() == "HISTOGRAM" {
			labels[mf.GetName()+"_bucket"] = append(names, "le")
		}
	}

	metricRE := regexp.MustCompile(`raftlock_[a-z_]+`)
	groupRE := regexp.MustCompile(`by \(([^)]*)\)`)
	matchRE := regexp.MustCompile(`([a-z_]+)=~?"`)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.Type == "" || p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %d %q: a duplicate id, or no type, title, place or query", p.ID, p.Title)
		}
		ids[p.ID] = true
		for _, q := range p.Targets {
			metrics := metricRE.FindAllString(q.Expr, -1)
			if q.RefID == "" || len(metrics) == 0 {
				t.Errorf("panel %q: query %q has no refId or reads no raftlock metric", p.Title, q.Expr)
			}
			var used []string
			for _, m := range groupRE.FindAllStringSubmatch(q.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					used = append(used, strings.TrimSpace(l))
				}
			}
			for _, m := range matchRE.FindAllStringSubmatch(q.Expr, -1) {
				used = append(used, m[1])
			}
			for _, name := range metrics {
				have, ok := labels[name]
				if !ok {
					t.Errorf("panel %q queries %s, which no member exports", p.Title, name)
					continue
				}
				for _, l := range used {
					if l != "instance" && !slices.Contains(have, l) { // Prometheus adds instance when it scrapes
						t.Errorf("panel %q groups or selects %s by %q, a label it does not have", p.Title, name, l)
					}
				}
			}
		}
	}
}
