// volcano-oracle: our own harness around the real Volcano scheduler (no Volcano code here).
//
// snapshot.go reads gangsched's snapshot interchange format (Snapshot.to_dict) and turns it
// into the Kubernetes / Volcano API objects that Volcano's scheduler cache is fed by its
// informers: v1.Node, v1.Pod, v1beta1.PodGroup, v1beta1.Queue and v1.PriorityClass.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	vcv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

const (
	gpuResource   = "nvidia.com/gpu"
	gpuModelLabel = "nvidia.com/gpu.product"
	// A node that lists no "pods" in gangsched has no pod limit; Volcano's predicates need
	// one (Allocatable.MaxTaskNum), so it gets this many.
	unlimitedPods = 1 << 20
	schedulerName = "volcano"
)

// baseTime is the creation time of everything; job.creation (seconds) is added to it.
var baseTime = time.Date(2023, 4, 7, 0, 0, 0, 0, time.UTC)

// qty is a quantity as gangsched writes it: a JSON number or a Kubernetes quantity string.
type qty string

func (q *qty) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*q = qty(s)
		return nil
	}
	*q = qty(string(b))
	return nil
}

func (q qty) parse() (resource.Quantity, error) { return resource.ParseQuantity(string(q)) }

type resMap map[string]qty

type gsGpus struct {
	Count   int64  `json:"count"`
	Model   string `json:"model"`
	Milli   *int64 `json:"milli"`
	Sharing *bool  `json:"sharing"`
}

type gsTaint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

type gsNode struct {
	Name          string            `json:"name"`
	Allocatable   resMap            `json:"allocatable"`
	Gpus          *gsGpus           `json:"gpus"`
	Labels        map[string]string `json:"labels"`
	Taints        []gsTaint         `json:"taints"`
	Unschedulable bool              `json:"unschedulable"`
}

type gsQueue struct {
	Name         string  `json:"name"`
	Weight       *int32  `json:"weight"`
	Capability   resMap  `json:"capability"`
	Guarantee    resMap  `json:"guarantee"`
	Deserved     resMap  `json:"deserved"`
	Parent       *string `json:"parent"`
	State        string  `json:"state"`
	Reclaimable  *bool   `json:"reclaimable"`
	Priority     int64   `json:"priority"`
	LendingLimit resMap  `json:"lending_limit"`
}

type gsJob struct {
	Name            string           `json:"name"`
	Queue           *string          `json:"queue"`
	MinAvailable    *int32           `json:"min_available"`
	MinTaskMember   map[string]int32 `json:"min_task_member"`
	Priority        int32            `json:"priority"`
	Preemptable     *bool            `json:"preemptable"`
	Phase           string           `json:"phase"`
	MinResources    resMap           `json:"min_resources"`
	NetworkTopology json.RawMessage  `json:"network_topology"`
	Policies        json.RawMessage  `json:"policies"`
	Creation        int64            `json:"creation"`
	RolePolicies    json.RawMessage  `json:"role_policies"`
	Age             int64            `json:"age"`
	Walltime        *int64           `json:"walltime"`
	PreemptionDelay int64            `json:"preemption_delay"`
	TaskTopology    *gsTaskTopology  `json:"task_topology"`
}

type gsGpuRequest struct {
	Count  *int64   `json:"count"`
	Milli  *int64   `json:"milli"`
	Models []string `json:"models"`
}

type gsToleration struct {
	Key      string `json:"key"`
	Operator string `json:"operator"`
	Value    string `json:"value"`
	Effect   string `json:"effect"`
}

// gsRequirement, gsTerm, gsPreferred and gsNodeAffinity are gangsched's node_affinity
// (model/affinity.py: NodeAffinity.to_dict).
type gsRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

type gsTerm struct {
	MatchExpressions []gsRequirement `json:"match_expressions"`
	MatchFields      []gsRequirement `json:"match_fields"`
}

type gsPreferred struct {
	Weight     int32  `json:"weight"`
	Preference gsTerm `json:"preference"`
}

type gsNodeAffinity struct {
	Required  []gsTerm      `json:"required"`
	Preferred []gsPreferred `json:"preferred"`
}

// gsTaskTopology is gangsched's job.task_topology (TaskTopology.to_dict).
type gsTaskTopology struct {
	Affinity     [][]string `json:"affinity"`
	AntiAffinity [][]string `json:"anti_affinity"`
	TaskOrder    []string   `json:"task_order"`
}

func (r gsRequirement) k8s() v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: r.Key, Operator: v1.NodeSelectorOperator(r.Operator), Values: r.Values}
}

func (t gsTerm) k8s() v1.NodeSelectorTerm {
	var out v1.NodeSelectorTerm
	for _, r := range t.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, r.k8s())
	}
	for _, r := range t.MatchFields {
		out.MatchFields = append(out.MatchFields, r.k8s())
	}
	return out
}

// nodeAffinity is the pod's spec.affinity.nodeAffinity: gangsched's node_affinity, and the GPU
// models (when given) as one more requirement of every required term.
func nodeAffinity(na *gsNodeAffinity, models *v1.NodeSelectorRequirement) *v1.Affinity {
	if na == nil && models == nil {
		return nil
	}
	out := &v1.NodeAffinity{}
	var terms []v1.NodeSelectorTerm
	if na != nil {
		for _, t := range na.Required {
			terms = append(terms, t.k8s())
		}
		for _, p := range na.Preferred {
			out.PreferredDuringSchedulingIgnoredDuringExecution = append(
				out.PreferredDuringSchedulingIgnoredDuringExecution,
				v1.PreferredSchedulingTerm{Weight: p.Weight, Preference: p.Preference.k8s()})
		}
	}
	if models != nil {
		if len(terms) == 0 {
			terms = []v1.NodeSelectorTerm{{}}
		}
		for i := range terms {
			terms[i].MatchExpressions = append(terms[i].MatchExpressions, *models)
		}
	}
	if len(terms) > 0 {
		out.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{NodeSelectorTerms: terms}
	}
	return &v1.Affinity{NodeAffinity: out}
}

func joinGroups(groups [][]string) string {
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, strings.Join(g, ","))
	}
	return strings.Join(parts, ";")
}

type gsTask struct {
	Name             string            `json:"name"`
	Job              string            `json:"job"`
	Role             string            `json:"role"`
	Request          resMap            `json:"request"`
	GpuRequest       *gsGpuRequest     `json:"gpu_request"`
	Phase            string            `json:"phase"`
	Node             *string           `json:"node"`
	GpuIndices       []int             `json:"gpu_indices"`
	Priority         int32             `json:"priority"`
	Preemptable      *bool             `json:"preemptable"`
	NodeSelector     map[string]string `json:"node_selector"`
	Tolerations      []gsToleration    `json:"tolerations"`
	PreemptionPolicy string            `json:"preemption_policy"`
	NodeAffinity     *gsNodeAffinity   `json:"node_affinity"`
}

type gsSnapshot struct {
	Nodes             []gsNode          `json:"nodes"`
	Hypernodes        []json.RawMessage `json:"hypernodes"`
	Queues            []gsQueue         `json:"queues"`
	Jobs              []gsJob           `json:"jobs"`
	Tasks             []gsTask          `json:"tasks"`
	DisruptionBudgets []json.RawMessage `json:"disruption_budgets"`
}

// objects are the API objects built from one snapshot, plus the maps back to its names.
type objects struct {
	nodes     []*v1.Node
	queues    []*vcv1beta1.Queue
	pgs       []*vcv1beta1.PodGroup
	pods      []*v1.Pod
	pcs       []*schedulingv1.PriorityClass
	nodeIndex map[string]int    // node name -> position in the snapshot
	taskName  map[string]string // pod UID -> gangsched task name (they are equal)
	jobName   map[string]string // Volcano JobID (namespace/name) -> gangsched job name
	jobOf     map[string]string // gangsched task -> gangsched job
	taskOrder map[string]int    // gangsched task -> position in the snapshot
	notes     []string          // what Volcano at this commit cannot represent
}

func splitName(name string) (string, string) {
	if i := strings.Index(name, "/"); i > 0 {
		return name[:i], name[i+1:]
	}
	return "default", name
}

func (r resMap) list(what string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q, err := r[k].parse()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", what, k, err)
		}
		out[v1.ResourceName(k)] = q
	}
	return out, nil
}

func priorityClassName(p int32) string {
	if p < 0 {
		return fmt.Sprintf("gs-priority-m%d", -int64(p))
	}
	return fmt.Sprintf("gs-priority-%d", p)
}

func noteOnce(seen map[string]bool, notes *[]string, msg string) {
	if !seen[msg] {
		seen[msg] = true
		*notes = append(*notes, msg)
	}
}

func buildObjects(s *gsSnapshot) (*objects, error) {
	o := &objects{
		nodeIndex: map[string]int{},
		taskName:  map[string]string{},
		jobName:   map[string]string{},
		jobOf:     map[string]string{},
		taskOrder: map[string]int{},
	}
	seen := map[string]bool{}
	note := func(msg string) { noteOnce(seen, &o.notes, msg) }
	if len(s.Hypernodes) > 0 {
		note("hypernodes: ignored (no HyperNode at this Volcano commit)")
	}
	if len(s.DisruptionBudgets) > 0 {
		note("disruption_budgets: ignored (no pdb plugin at this Volcano commit)")
	}

	// Nodes.
	for i, n := range s.Nodes {
		o.nodeIndex[n.Name] = i
		alloc, err := n.Allocatable.list("node " + n.Name + ": allocatable")
		if err != nil {
			return nil, err
		}
		if _, ok := alloc[v1.ResourcePods]; !ok {
			alloc[v1.ResourcePods] = *resource.NewQuantity(unlimitedPods, resource.DecimalSI)
		}
		labels := map[string]string{"kubernetes.io/hostname": n.Name}
		for k, v := range n.Labels {
			labels[k] = v
		}
		if n.Gpus != nil && n.Gpus.Count > 0 {
			milli := int64(1000)
			if n.Gpus.Milli != nil {
				milli = *n.Gpus.Milli
			}
			if milli != 1000 {
				note("gpus.milli != 1000: a node's GPUs become one nvidia.com/gpu pool of count*milli milli-GPU")
			}
			alloc[gpuResource] = *resource.NewMilliQuantity(n.Gpus.Count*milli, resource.DecimalSI)
			if n.Gpus.Model != "" {
				if _, ok := labels[gpuModelLabel]; !ok {
					labels[gpuModelLabel] = n.Gpus.Model
				}
			}
		}
		var taints []v1.Taint
		for _, t := range n.Taints {
			eff := t.Effect
			if eff == "" {
				eff = "NoSchedule"
			}
			taints = append(taints, v1.Taint{Key: t.Key, Value: t.Value, Effect: v1.TaintEffect(eff)})
		}
		o.nodes = append(o.nodes, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:              n.Name,
				UID:               types.UID("node-" + n.Name),
				Labels:            labels,
				Annotations:       map[string]string{},
				CreationTimestamp: metav1.NewTime(baseTime),
			},
			Spec: v1.NodeSpec{Unschedulable: n.Unschedulable, Taints: taints},
			Status: v1.NodeStatus{
				Capacity:    alloc.DeepCopy(),
				Allocatable: alloc,
				Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			},
		})
	}

	// Queues.
	parents := map[string]string{}
	weights := map[string]int32{}
	for _, q := range s.Queues {
		w := int32(1)
		if q.Weight != nil {
			w = *q.Weight
		}
		weights[q.Name] = w
		if q.Parent != nil {
			parents[q.Name] = *q.Parent
		}
	}
	for i, q := range s.Queues {
		capability, err := q.Capability.list("queue " + q.Name + ": capability")
		if err != nil {
			return nil, err
		}
		guarantee, err := q.Guarantee.list("queue " + q.Name + ": guarantee")
		if err != nil {
			return nil, err
		}
		if len(q.Deserved) > 0 {
			note("queue.deserved: ignored (capacity plugin's deserved does not exist at this Volcano commit)")
		}
		if q.Priority != 0 {
			note("queue.priority: ignored (no queue priority at this Volcano commit)")
		}
		if len(q.LendingLimit) > 0 {
			note("queue.lending_limit: ignored")
		}
		state := vcv1beta1.QueueStateOpen
		switch q.State {
		case "", "Open":
		case "Closed":
			state = vcv1beta1.QueueStateClosed
		case "Closing":
			state = vcv1beta1.QueueStateClosing
		default:
			return nil, fmt.Errorf("queue %s: unknown state %q", q.Name, q.State)
		}
		if state != vcv1beta1.QueueStateOpen {
			note("queue.state Closed/Closing: passed as status.state, which the scheduler does not read at this Volcano commit")
		}
		annotations := map[string]string{}
		if len(parents) > 0 {
			// Volcano's hierarchy annotations (read by drf with enableHierarchy only).
			chain := []string{q.Name}
			ws := []string{strconv.Itoa(int(weights[q.Name]))}
			for cur, depth := q.Name, 0; depth < 256; depth++ {
				p, ok := parents[cur]
				if !ok || p == "root" {
					break
				}
				chain = append([]string{p}, chain...)
				ws = append([]string{strconv.Itoa(int(weights[p]))}, ws...)
				cur = p
			}
			annotations[vcv1beta1.KubeHierarchyAnnotationKey] = "root/" + strings.Join(chain, "/")
			annotations[vcv1beta1.KubeHierarchyWeightAnnotationKey] = "1/" + strings.Join(ws, "/")
			note("queue.parent: written as volcano.sh/hierarchy annotations (only drf with enableHierarchy reads them at this commit)")
		}
		reclaimable := q.Reclaimable == nil || *q.Reclaimable
		queue := &vcv1beta1.Queue{
			ObjectMeta: metav1.ObjectMeta{
				Name:              q.Name,
				UID:               types.UID("queue-" + q.Name),
				Annotations:       annotations,
				CreationTimestamp: metav1.NewTime(baseTime.Add(time.Duration(i) * time.Millisecond)),
			},
			Spec: vcv1beta1.QueueSpec{
				Weight:      weights[q.Name],
				Capability:  capability,
				Reclaimable: &reclaimable,
				Guarantee:   vcv1beta1.Guarantee{Resource: guarantee},
			},
			Status: vcv1beta1.QueueStatus{State: state},
		}
		if len(capability) == 0 {
			queue.Spec.Capability = nil
		}
		o.queues = append(o.queues, queue)
	}

	// Jobs (PodGroups) and their priority classes.
	jobs := map[string]*gsJob{}
	pcs := map[int32]bool{}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		jobs[j.Name] = j
		ns, name := splitName(j.Name)
		o.jobName[ns+"/"+name] = j.Name
		queue := "default"
		if j.Queue != nil {
			queue = *j.Queue
		}
		minMember := int32(1)
		if j.MinAvailable != nil {
			minMember = *j.MinAvailable
		}
		phase := j.Phase
		if phase == "" {
			phase = "Pending"
		}
		var minRes *v1.ResourceList
		if j.MinResources != nil {
			rl, err := j.MinResources.list("job " + j.Name + ": min_resources")
			if err != nil {
				return nil, err
			}
			minRes = &rl
		}
		if len(j.NetworkTopology) > 0 && string(j.NetworkTopology) != "null" {
			note("job.network_topology: ignored (no network topology at this Volcano commit)")
		}
		if len(j.Policies) > 0 && string(j.Policies) != "null" && string(j.Policies) != "[]" {
			note("job.policies: ignored (lifecycle policies belong to the job controller)")
		}
		if j.Walltime != nil || j.PreemptionDelay != 0 {
			note("job.walltime / preemption_delay: ignored")
		}
		annotations := map[string]string{}
		if j.Preemptable != nil && !*j.Preemptable {
			annotations[vcv1beta1.PodPreemptable] = "false"
		}
		if tt := j.TaskTopology; tt != nil {
			if len(tt.Affinity) > 0 {
				annotations["volcano.sh/task-topology-affinity"] = joinGroups(tt.Affinity)
			}
			if len(tt.AntiAffinity) > 0 {
				annotations["volcano.sh/task-topology-anti-affinity"] = joinGroups(tt.AntiAffinity)
			}
			if len(tt.TaskOrder) > 0 {
				annotations["volcano.sh/task-topology-task-order"] = strings.Join(tt.TaskOrder, ",")
			}
		}
		pcs[j.Priority] = true
		created := baseTime.Add(time.Duration(j.Creation) * time.Second)
		o.pgs = append(o.pgs, &vcv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{
				Name:              name,
				Namespace:         ns,
				UID:               types.UID("pg-" + j.Name),
				Annotations:       annotations,
				CreationTimestamp: metav1.NewTime(created),
			},
			Spec: vcv1beta1.PodGroupSpec{
				MinMember:         minMember,
				MinTaskMember:     j.MinTaskMember,
				Queue:             queue,
				PriorityClassName: priorityClassName(j.Priority),
				MinResources:      minRes,
			},
			Status: vcv1beta1.PodGroupStatus{Phase: vcv1beta1.PodGroupPhase(phase)},
		})
	}
	keys := make([]int, 0, len(pcs))
	for p := range pcs {
		keys = append(keys, int(p))
	}
	sort.Ints(keys)
	for _, p := range keys {
		o.pcs = append(o.pcs, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: priorityClassName(int32(p))},
			Value:      int32(p),
		})
	}

	// Tasks (pods).
	for i, t := range s.Tasks {
		o.taskOrder[t.Name] = i
		o.jobOf[t.Name] = t.Job
		j, ok := jobs[t.Job]
		if !ok {
			return nil, fmt.Errorf("task %s: unknown job %q", t.Name, t.Job)
		}
		ns, pgName := splitName(j.Name)
		podName := t.Name
		if tns, tn := splitName(t.Name); tns == ns && strings.Contains(t.Name, "/") {
			podName = tn
		}
		if j.TaskTopology != nil && t.Role != "" {
			// Volcano's task-topology plugin reads a pod's role from its name, as Volcano's job
			// controller names pods: <job>-<task spec>-<index> (the second-to-last "-" field).
			// Results are reported by UID (the gangsched task name), so only Volcano sees this.
			podName = fmt.Sprintf("%s-%s-%d", pgName, t.Role, i)
		}
		req, err := t.Request.list("task " + t.Name + ": request")
		if err != nil {
			return nil, err
		}
		var models *v1.NodeSelectorRequirement
		if g := t.GpuRequest; g != nil {
			count := int64(1)
			if g.Count != nil {
				count = *g.Count
			}
			milli := int64(1000)
			if g.Milli != nil {
				milli = *g.Milli
			}
			if milli > 1000 {
				milli = 1000 // a whole-GPU request takes whole devices
			}
			if count > 0 {
				req[gpuResource] = *resource.NewMilliQuantity(count*milli, resource.DecimalSI)
			}
			if milli < 1000 && count > 0 {
				note("gpu_request.milli < 1000: requested as a fraction of the node's nvidia.com/gpu pool (no per-device packing, no whole-device rule on non-sharing nodes)")
			}
			if len(g.Models) > 0 {
				models = &v1.NodeSelectorRequirement{
					Key: gpuModelLabel, Operator: v1.NodeSelectorOpIn, Values: g.Models,
				}
			}
		}
		affinity := nodeAffinity(t.NodeAffinity, models)
		if len(t.GpuIndices) > 0 {
			note("task.gpu_indices: ignored (nvidia.com/gpu is a plain scalar resource here)")
		}
		annotations := map[string]string{
			vcv1beta1.KubeGroupNameAnnotationKey: pgName,
		}
		labels := map[string]string{}
		if t.Role != "" {
			annotations[batch.TaskSpecKey] = t.Role
			labels[batch.TaskSpecKey] = t.Role
		}
		taskPre := t.Preemptable == nil || *t.Preemptable
		jobPre := j.Preemptable == nil || *j.Preemptable
		// Always explicit: this Volcano reads a pod without the annotation as NOT preemptable,
		// while later Volcano (and gangsched) default to preemptable. Volcano's job controller
		// copies the job's volcano.sh/preemptable onto its pods.
		if !taskPre || !jobPre {
			annotations[vcv1beta1.PodPreemptable] = "false"
		} else {
			annotations[vcv1beta1.PodPreemptable] = "true"
		}
		var tolerations []v1.Toleration
		for _, tl := range t.Tolerations {
			op := tl.Operator
			if op == "" {
				op = "Equal"
			}
			tolerations = append(tolerations, v1.Toleration{
				Key: tl.Key, Operator: v1.TolerationOperator(op), Value: tl.Value, Effect: v1.TaintEffect(tl.Effect),
			})
		}
		prio := t.Priority
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:        podName,
				Namespace:   ns,
				UID:         types.UID(t.Name),
				Annotations: annotations,
				Labels:      labels,
				// Pods of one job are created in snapshot order (CompareTask's last key).
				CreationTimestamp: metav1.NewTime(baseTime.Add(
					time.Duration(j.Creation)*time.Second + time.Duration(i)*time.Microsecond)),
			},
			Spec: v1.PodSpec{
				SchedulerName: schedulerName,
				Priority:      &prio,
				NodeSelector:  t.NodeSelector,
				Tolerations:   tolerations,
				Affinity:      affinity,
				Containers: []v1.Container{{
					Name:      "main",
					Resources: v1.ResourceRequirements{Requests: req},
				}},
			},
		}
		if t.PreemptionPolicy == "Never" {
			never := v1.PreemptNever
			pod.Spec.PreemptionPolicy = &never
			note("task.preemption_policy Never: set on the pod; not read by the scheduler at this Volcano commit")
		}
		node := ""
		if t.Node != nil {
			node = *t.Node
		}
		switch t.Phase {
		case "", "Pending":
			pod.Status.Phase = v1.PodPending
		case "Pipelined":
			// A reservation only lives inside one Volcano session.
			pod.Status.Phase = v1.PodPending
			note("task phase Pipelined: becomes a Pending pod (Volcano keeps no pipelined state between sessions)")
		case "Bound":
			pod.Status.Phase = v1.PodPending
			pod.Spec.NodeName = node
		case "Running":
			pod.Status.Phase = v1.PodRunning
			pod.Spec.NodeName = node
		case "Releasing":
			pod.Status.Phase = v1.PodRunning
			pod.Spec.NodeName = node
			del := metav1.NewTime(baseTime)
			pod.DeletionTimestamp = &del
		case "Succeeded":
			pod.Status.Phase = v1.PodSucceeded
			pod.Spec.NodeName = node
		case "Failed":
			pod.Status.Phase = v1.PodFailed
			pod.Spec.NodeName = node
		default:
			return nil, fmt.Errorf("task %s: unknown phase %q", t.Name, t.Phase)
		}
		o.taskName[t.Name] = t.Name
		o.pods = append(o.pods, pod)
	}
	return o, nil
}
