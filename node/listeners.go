package node

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// listenerHealth is what the member's listeners last reported about their
// accepts (ReportListener): a listener that cannot accept, out of file
// descriptors say, leaves the member up but unreachable on that port,
// which /healthz must say.
type listenerHealth struct {
	mu      sync.Mutex
	failing map[string]error
}

// ReportListener records whether the listener named name (client, api,
// http) accepts: err non-nil while its accepts keep failing, nil once
// one succeeds again. Healthy fails while any listener fails.
func (n *Node) ReportListener(name string, err error) {
	h := &n.listeners
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.failing, name)
		return
	}
	if h.failing == nil {
		h.failing = map[string]error{}
	}
	h.failing[name] = err
}

// listenersErr says which listeners cannot accept, nil when all can.
func (n *Node) listenersErr() error {
	h := &n.listeners
	h.mu.Lock()
	var failing []string
	for name, err := range h.failing {
		failing = append(failing, fmt.Sprintf("the %s port cannot accept connections: %v", name, err))
	}
	h.mu.Unlock()
	if err := n.PeerListenerErr(); err != nil {
		failing = append(failing, fmt.Sprintf("the peer port cannot accept connections: %v", err))
	}
	if len(failing) == 0 {
		return nil
	}
	slices.Sort(failing)
	return fmt.Errorf("%s", strings.Join(failing, "; "))
}
