package client_test

import (
	"testing"

	"github.com/raftlock/raftlock/node"
)

func gaugeValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
