// nodeaffinity.go: optional emulation of later Volcano's NodeAffinity score, for attributing
// divergences (our own code; it calls Kubernetes' node-affinity helpers).
//
// nodeaffinity-normalize: at this commit nodeorder adds the raw NodeAffinity score (the summed
// weights of the preferred terms a node matches) times nodeaffinity.weight. Upstream 375da74fc
// ("unify Score plugins through BatchNodeOrderFn", v1.16.0) scores NodeAffinity through the
// batch path with the plugin's NormalizeScore: 100 * sum / (the largest sum among the scored
// nodes), integer division, then the weight. The emulation opens nodeorder with
// nodeaffinity.weight 0 and adds that normalised score from a plugin of ours, in a tier of its
// own (scores of all tiers are summed, so the tier does not matter).
package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
)

const nodeAffinityPlugin = "oracle-nodeaffinity"

// nodeAffinityWeight is nodeorder's nodeaffinity.weight as the configuration gives it
// (Volcano's default 2), read when nodeorder is built.
var (
	nodeAffinityWeight    = 2
	nodeAffinityNormalize = false
)

type normalizedNodeAffinity struct{}

func (normalizedNodeAffinity) Name() string { return nodeAffinityPlugin }

func (normalizedNodeAffinity) OnSessionOpen(ssn *framework.Session) {
	ssn.AddBatchNodeOrderFn(nodeAffinityPlugin, func(task *api.TaskInfo, nodes []*api.NodeInfo) (map[string]float64, error) {
		out := make(map[string]float64, len(nodes))
		var terms []v1.PreferredSchedulingTerm
		if a := task.Pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
			terms = a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		}
		if len(terms) == 0 || nodeAffinityWeight == 0 {
			return out, nil
		}
		pref, err := nodeaffinity.NewPreferredSchedulingTerms(terms)
		if err != nil {
			return nil, err
		}
		raw := make(map[string]int64, len(nodes))
		var most int64
		for _, n := range nodes {
			s := pref.Score(n.Node)
			raw[n.Name] = s
			if s > most {
				most = s
			}
		}
		for name, s := range raw {
			if most > 0 {
				out[name] = float64(100*s/most) * float64(nodeAffinityWeight)
			}
		}
		return out, nil
	})
}

func (normalizedNodeAffinity) OnSessionClose(*framework.Session) {}

func applyNodeAffinityNormalize() {
	inner, ok := framework.GetPluginBuilder(nodeorder.PluginName)
	if !ok {
		inner = nodeorder.New
	}
	framework.RegisterPluginBuilder(nodeorder.PluginName, func(a framework.Arguments) framework.Plugin {
		w := 2
		a.GetInt(&w, nodeorder.NodeAffinityWeight)
		nodeAffinityWeight = w
		args := framework.Arguments{}
		for k, v := range a {
			args[k] = v
		}
		args[nodeorder.NodeAffinityWeight] = 0
		return inner(args)
	})
	framework.RegisterPluginBuilder(nodeAffinityPlugin, func(framework.Arguments) framework.Plugin {
		return normalizedNodeAffinity{}
	})
	nodeAffinityNormalize = true
}

func nodeAffinityTier() conf.Tier {
	on := true
	return conf.Tier{Plugins: []conf.PluginOption{{Name: nodeAffinityPlugin, EnabledNodeOrder: &on}}}
}
