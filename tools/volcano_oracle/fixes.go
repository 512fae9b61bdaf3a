// fixes.go: optional emulation of upstream fixes made after this commit, for attributing
// divergences. Off by default: the default oracle is Volcano as it was at this commit.
//
// nodeorder-addpod: at this commit both the predicates and the nodeorder plugins register an
// AllocateFunc/DeallocateFunc that calls AddPod/RemovePod on the same ssn.NodeMap, so every pod
// allocated (or pipelined, or evicted) during a session is counted twice in the Kubernetes
// NodeInfo that the pod-count predicate and the k8s scoring plugins read. Upstream commit
// 9167045b7 ("fix PodToplogySpread plugin violates maxSkew", June 2023, first in v1.8.0)
// removed nodeorder's handlers. The emulation leaves Volcano's code as it is and wraps the
// nodeorder plugin so that it opens on its own copy of ssn.NodeMap: each map then receives each
// pod once (nodeorder's own handler updates its copy, predicates' handler the shared one).
package main

import (
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/preempt"
	"volcano.sh/volcano/pkg/scheduler/actions/reclaim"

	k8sframework "k8s.io/kubernetes/pkg/scheduler/framework"

	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
	"volcano.sh/volcano/pkg/scheduler/util"
)

type nodeorderOwnMap struct {
	inner framework.Plugin
}

func (p *nodeorderOwnMap) Name() string { return p.inner.Name() }

func (p *nodeorderOwnMap) OnSessionOpen(ssn *framework.Session) {
	shared := ssn.NodeMap
	own := make(map[string]*k8sframework.NodeInfo, len(shared))
	for name, ni := range shared {
		own[name] = ni.Clone()
	}
	ssn.NodeMap = own
	p.inner.OnSessionOpen(ssn)
	ssn.NodeMap = shared
}

func (p *nodeorderOwnMap) OnSessionClose(ssn *framework.Session) { p.inner.OnSessionClose(ssn) }

func applyFix(name string) bool {
	switch name {
	case "nodeorder-addpod":
		framework.RegisterPluginBuilder(nodeorder.PluginName, func(a framework.Arguments) framework.Plugin {
			return &nodeorderOwnMap{inner: nodeorder.New(a)}
		})
		return true
	case "preempt-queue-allocatable":
		// Upstream af5c56308 (v1.9.0), switch in the extended build's preempt.go.
		preempt.OracleQueueAllocatable = true
		return true
	case "tier-walk":
		// Upstream 7976b63e2 (v1.11.0): no flag across tiers in the victim walk; switch in
		// the extended build's session_plugins.go (later.patch).
		framework.OracleTierWalk = true
		return true
	case "preempt-empty-victims":
		// Upstream 5939cc189 (v1.8.0): ValidateVictims accepts a node where the preemptor
		// fits with no victim; switch in the extended build's scheduler_helper.go.
		util.OracleEmptyVictims = true
		return true
	case "reclaim-keep-queue":
		// Upstream 305771369 (v1.14.0): a task its queue refuses does not end the queue's
		// turn in reclaim; switch in the extended build's reclaim.go (later.patch).
		reclaim.OracleReclaimKeepQueue = true
		return true
	case "nodeaffinity-normalize":
		applyNodeAffinityNormalize()
		return true
	case "allocate-queue-order":
		// Upstream a684cd848 (v1.10.0): allocate pushes a queue back after its job's
		// allocation, so the queue order reads the share that allocation left. The extended
		// build's allocate.go carries the switch (later.patch).
		allocate.OracleQueueAfterJob = true
		return true
	}
	return false
}
