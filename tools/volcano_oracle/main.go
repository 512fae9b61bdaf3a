// volcano-oracle runs one scheduling session of the real Volcano scheduler (the vendored
// source tree this file is built inside) on a gangsched snapshot, in process, with no API
// server, and prints what it decided and how long each phase took.
//
//	volcano-oracle [flags] [input.json|-]
//
// The input is gangsched's snapshot interchange format (Snapshot.to_dict), or an envelope
// {"snapshot": {...}, "conf": "<volcano-scheduler.conf YAML text>"}. See README.md.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v2"
	"k8s.io/klog/v2"

	"volcano.sh/volcano/cmd/scheduler/app/options"
	_ "volcano.sh/volcano/pkg/scheduler/actions" // registers enqueue, allocate, backfill, preempt, reclaim, shuffle
	"volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins" // registers the built-in plugins
)

// Set at build time (build.sh): the Volcano commit this binary was built from.
var (
	volcanoCommit   = "unknown"
	volcanoDescribe = "unknown"
	volcanoDate     = "unknown"
)

// defaultConf is the configuration Volcano's scheduler uses when it is given no file
// (pkg/scheduler/util.go at this commit).
const defaultConf = `
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
`

type envelope struct {
	Snapshot json.RawMessage `json:"snapshot"`
	Conf     *string         `json:"conf"`
}

// loadConf reads volcano-scheduler.conf text the way the scheduler does at this commit:
// YAML into conf.SchedulerConfiguration, plugins.ApplyPluginConfDefaults on every plugin,
// the hierarchical-drf/proportion conflict check, actions looked up by name.
func loadConf(text string) ([]framework.Action, []conf.Tier, []conf.Configuration, error) {
	sc := &conf.SchedulerConfiguration{}
	if err := yaml.Unmarshal([]byte(text), sc); err != nil {
		return nil, nil, nil, err
	}
	for i, tier := range sc.Tiers {
		hdrf, proportion := false, false
		for j := range tier.Plugins {
			p := &sc.Tiers[i].Plugins[j]
			if p.Name == "drf" && p.EnabledHierarchy != nil && *p.EnabledHierarchy {
				hdrf = true
			}
			if p.Name == "proportion" {
				proportion = true
			}
			if _, ok := framework.GetPluginBuilder(p.Name); !ok {
				return nil, nil, nil, fmt.Errorf("unknown plugin %q at this Volcano commit", p.Name)
			}
			plugins.ApplyPluginConfDefaults(p)
		}
		if hdrf && proportion {
			return nil, nil, nil, fmt.Errorf("proportion and drf with hierarchy enabled conflicts")
		}
	}
	var actions []framework.Action
	for _, name := range strings.Split(sc.Actions, ",") {
		name = strings.TrimSpace(name)
		a, ok := framework.GetAction(name)
		if !ok {
			return nil, nil, nil, fmt.Errorf("failed to find Action %s", name)
		}
		actions = append(actions, a)
	}
	return actions, sc.Tiers, sc.Configurations, nil
}

type stat struct {
	MinNs    int64   `json:"min_ns"`
	MedianNs int64   `json:"median_ns"`
	Samples  []int64 `json:"samples_ns"`
}

func summarize(xs []int64) stat {
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{MinNs: s[0], MedianNs: med, Samples: xs}
}

type taskNode struct {
	Task string `json:"task"`
	Node string `json:"node"`
	Job  string `json:"job"`
}

type eviction struct {
	Task   string `json:"task"`
	Node   string `json:"node"`
	Job    string `json:"job"`
	Reason string `json:"reason"`
}

type jobOut struct {
	Phase        string `json:"phase"`
	InputPhase   string `json:"input_phase"`
	Valid        bool   `json:"valid"`
	Reason       string `json:"reason,omitempty"`
	Ready        bool   `json:"ready"`
	MinAvailable int32  `json:"min_available"`
	Bound        int    `json:"bound"`
	Pipelined    int    `json:"pipelined"`
	Evicted      int    `json:"evicted"`
	Allocated    int    `json:"allocated_not_bound"`
	Running      int    `json:"running"`
	Pending      int    `json:"pending"`
}

type nodeOut struct {
	Used      map[string]float64 `json:"used"`
	Idle      map[string]float64 `json:"idle"`
	Releasing map[string]float64 `json:"releasing"`
	Pipelined map[string]float64 `json:"pipelined"`
}

type decisions struct {
	Binds     []taskNode `json:"binds"`
	Pipelined []taskNode `json:"pipelined"`
	// Allocated: tasks left Allocated in the session at its end (a gang that is not ready
	// but pipelined keeps its statement: resources held in the session, nothing bound).
	Allocated []taskNode         `json:"allocated_not_bound"`
	Evictions []eviction         `json:"evictions"`
	Jobs      map[string]jobOut  `json:"jobs"`
	Nodes     map[string]nodeOut `json:"nodes,omitempty"`
}

func resMapOut(r *api.Resource) map[string]float64 {
	out := map[string]float64{"cpu": r.MilliCPU, "memory": r.Memory}
	for k, v := range r.ScalarResources {
		out[string(k)] = v
	}
	return out
}

func (d *decisions) digest() string {
	type canon struct {
		B, P, A []taskNode
		E       []eviction
		J       map[string]string
	}
	c := canon{B: append([]taskNode(nil), d.Binds...), P: append([]taskNode(nil), d.Pipelined...),
		A: append([]taskNode(nil), d.Allocated...),
		E: append([]eviction(nil), d.Evictions...), J: map[string]string{}}
	sort.Slice(c.B, func(i, j int) bool { return c.B[i].Task < c.B[j].Task })
	sort.Slice(c.P, func(i, j int) bool { return c.P[i].Task < c.P[j].Task })
	sort.Slice(c.E, func(i, j int) bool { return c.E[i].Task < c.E[j].Task })
	for k, v := range d.Jobs {
		c.J[k] = v.Phase
	}
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

type runTiming struct {
	cacheBuild int64
	open       int64
	actions    []int64
	close      int64
	cpu        int64 // process CPU time (user+system, all threads) of open+actions+close
}

func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func runOnce(o *objects, snap *gsSnapshot, actions []framework.Action, tiers []conf.Tier,
	cfgs []conf.Configuration, withNodes bool) (*decisions, runTiming) {
	var tm runTiming
	runtime.GC()
	t0 := time.Now()
	oc, _ := newOracleCache(o)
	tm.cacheBuild = time.Since(t0).Nanoseconds()

	// What Scheduler.runOnce does before it opens the session.
	conf.EnabledActionMap = map[string]bool{}
	for _, a := range actions {
		conf.EnabledActionMap[a.Name()] = true
	}

	c0 := cpuNow()
	t := time.Now()
	ssn := framework.OpenSession(oc, tiers, cfgs)
	tm.open = time.Since(t).Nanoseconds()
	for _, a := range actions {
		t = time.Now()
		a.Execute(ssn)
		tm.actions = append(tm.actions, time.Since(t).Nanoseconds())
	}
	c1 := cpuNow()

	// Read the session before it is closed (not timed).
	d := &decisions{Binds: []taskNode{}, Pipelined: []taskNode{}, Allocated: []taskNode{}, Evictions: []eviction{}, Jobs: map[string]jobOut{}}
	jobs := ssn.Jobs
	ready := map[api.JobID]bool{}
	for id, job := range jobs {
		ready[id] = job.Ready()
		for _, task := range job.TaskStatusIndex[api.Pipelined] {
			d.Pipelined = append(d.Pipelined, taskNode{Task: string(task.UID), Node: task.NodeName, Job: o.jobName[string(id)]})
		}
		for _, task := range job.TaskStatusIndex[api.Allocated] {
			d.Allocated = append(d.Allocated, taskNode{Task: string(task.UID), Node: task.NodeName, Job: o.jobName[string(id)]})
		}
	}
	if withNodes {
		d.Nodes = map[string]nodeOut{}
		for name, n := range ssn.Nodes {
			d.Nodes[name] = nodeOut{Used: resMapOut(n.Used), Idle: resMapOut(n.Idle),
				Releasing: resMapOut(n.Releasing), Pipelined: resMapOut(n.Pipelined)}
		}
	}

	c2 := cpuNow()
	t = time.Now()
	framework.CloseSession(ssn)
	tm.close = time.Since(t).Nanoseconds()
	tm.cpu = (c1 - c0) + (cpuNow() - c2)

	for _, b := range oc.binds {
		d.Binds = append(d.Binds, taskNode{Task: b.uid, Node: b.node, Job: o.jobOf[b.uid]})
	}
	for _, e := range oc.evicts {
		d.Evictions = append(d.Evictions, eviction{Task: e.uid, Node: e.node, Job: o.jobOf[e.uid], Reason: e.reason})
	}
	sort.Slice(d.Pipelined, func(i, j int) bool { return o.taskOrder[d.Pipelined[i].Task] < o.taskOrder[d.Pipelined[j].Task] })
	sort.Slice(d.Allocated, func(i, j int) bool { return o.taskOrder[d.Allocated[i].Task] < o.taskOrder[d.Allocated[j].Task] })

	count := map[string]map[string]int{}
	add := func(job, key string) {
		if count[job] == nil {
			count[job] = map[string]int{}
		}
		count[job][key]++
	}
	for _, b := range d.Binds {
		add(b.Job, "bound")
	}
	for _, p := range d.Pipelined {
		add(p.Job, "pipelined")
	}
	for _, e := range d.Evictions {
		add(e.Job, "evicted")
	}
	inputPhase := map[string]string{}
	for _, j := range snap.Jobs {
		p := j.Phase
		if p == "" {
			p = "Pending"
		}
		inputPhase[j.Name] = p
	}
	for _, pg := range o.pgs {
		id := api.JobID(pg.Namespace + "/" + pg.Name)
		name := o.jobName[string(id)]
		out := jobOut{InputPhase: inputPhase[name], MinAvailable: pg.Spec.MinMember,
			Bound: count[name]["bound"], Pipelined: count[name]["pipelined"], Evicted: count[name]["evicted"]}
		if job, ok := jobs[id]; ok {
			out.Valid = true
			out.Phase = string(job.PodGroup.Status.Phase)
			out.Ready = ready[id]
			out.Allocated = len(job.TaskStatusIndex[api.Allocated])
			out.Running = len(job.TaskStatusIndex[api.Running])
			out.Pending = len(job.TaskStatusIndex[api.Pending])
		} else {
			// Dropped at OpenSession by a JobValid vote (gang: too few valid tasks); Volcano
			// writes no status for it in this session.
			out.Phase = inputPhase[name]
			out.Reason = "invalid (JobValid)"
			if cj, ok := oc.Jobs[id]; ok {
				out.Running = len(cj.TaskStatusIndex[api.Running])
				out.Pending = len(cj.TaskStatusIndex[api.Pending])
			}
		}
		d.Jobs[name] = out
	}
	return d, tm
}

func main() {
	fs := flag.NewFlagSet("volcano-oracle", flag.ExitOnError)
	confPath := fs.String("conf", "", "volcano-scheduler.conf (YAML); default: the envelope's conf, else Volcano's built-in default")
	repeat := fs.Int("repeat", 1, "run the session this many times on the same input (fresh cache each time)")
	procs := fs.Int("gomaxprocs", 0, "GOMAXPROCS (0: Go's default, the number of CPUs)")
	tie := fs.String("tie-break", "random", "allocate's choice among equal-score nodes: random (Volcano's own util.SelectBestNode) or first (lowest snapshot index, via the oracle-tiebreak BestNodeFn)")
	seed := fs.Int64("seed", 1, "math/rand seed (Go 1.19 seeds its global source with 1 by default)")
	pct := fs.Int("percentage-nodes-to-find", 100, "the scheduler's --percentage-nodes-to-find")
	minNodes := fs.Int("minimum-feasible-nodes", 100, "the scheduler's --minimum-feasible-nodes")
	minPct := fs.Int("minimum-percentage-nodes-to-find", 5, "the scheduler's --minimum-percentage-nodes-to-find")
	withNodes := fs.Bool("nodes", false, "also print each node's used/idle/releasing/pipelined after the actions")
	allRuns := fs.Bool("runs", false, "with -repeat: also print every repetition's decisions under \"runs\" (to see Volcano's own nondeterminism)")
	noDecisions := fs.Bool("timing-only", false, "print counts and timing only, not every bind")
	out := fs.String("o", "-", "output file")
	logV := fs.Int("v", -1, "klog verbosity on stderr (-1: Volcano's logs are discarded)")
	fixes := fs.String("fix", "", "comma-separated emulations of later upstream fixes (off by default; see fixes.go): nodeorder-addpod, allocate-queue-order, nodeaffinity-normalize, preempt-queue-allocatable, tier-walk, preempt-empty-victims, reclaim-keep-queue")
	_ = fs.Parse(os.Args[1:])

	kfs := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(kfs)
	if *logV < 0 {
		_ = kfs.Set("logtostderr", "false")
		_ = kfs.Set("alsologtostderr", "false")
		_ = kfs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	} else {
		_ = kfs.Set("v", fmt.Sprint(*logV))
	}

	var raw []byte
	var err error
	if fs.NArg() == 0 || fs.Arg(0) == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(fs.Arg(0))
	}
	fail(err)
	tParse := time.Now()
	var env envelope
	fail(json.Unmarshal(raw, &env))
	snapRaw := raw
	confText := defaultConf
	if env.Snapshot != nil {
		snapRaw = env.Snapshot
		if env.Conf != nil {
			confText = *env.Conf
		}
	}
	if *confPath != "" {
		b, err := os.ReadFile(*confPath)
		fail(err)
		confText = string(b)
	}
	var snap gsSnapshot
	fail(json.Unmarshal(snapRaw, &snap))
	objs, err := buildObjects(&snap)
	fail(err)
	parseNs := time.Since(tParse).Nanoseconds()

	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	rand.Seed(*seed)
	options.ServerOpts = &options.ServerOption{
		SchedulerNames:             []string{schedulerName},
		DefaultQueue:               "default",
		EnablePriorityClass:        true,
		MinNodesToFind:             int32(*minNodes),
		MinPercentageOfNodesToFind: int32(*minPct),
		PercentageOfNodesToFind:    int32(*pct),
	}
	fixList := []string{}
	for _, f := range strings.Split(*fixes, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !applyFix(f) {
			fail(fmt.Errorf("-fix: unknown fix %q", f))
		}
		fixList = append(fixList, f)
	}
	actions, tiers, cfgs, err := loadConf(confText)
	fail(err)
	confTiers := [][]string{}
	for _, t := range tiers {
		names := []string{}
		for _, p := range t.Plugins {
			names = append(names, p.Name)
		}
		confTiers = append(confTiers, names)
	}
	if nodeAffinityNormalize {
		tiers = append(tiers, nodeAffinityTier())
	}
	switch *tie {
	case "random":
	case "first":
		tieBreakIndex = objs.nodeIndex
		framework.RegisterPluginBuilder(tieBreakPlugin, newTieBreak)
		tiers = append(tiers, tieBreakTier())
	default:
		fail(fmt.Errorf("-tie-break: want random or first, got %q", *tie))
	}
	actionNames := []string{}
	for _, a := range actions {
		actionNames = append(actionNames, a.Name())
	}

	var first *decisions
	var runs []*decisions
	var tms []runTiming
	digests := map[string]int{}
	for r := 0; r < *repeat; r++ {
		d, tm := runOnce(objs, &snap, actions, tiers, cfgs, *withNodes)
		digests[d.digest()]++
		if first == nil {
			first = d
		}
		if *allRuns {
			runs = append(runs, d)
		}
		tms = append(tms, tm)
	}

	collect := func(f func(runTiming) int64) stat {
		xs := []int64{}
		for _, t := range tms {
			xs = append(xs, f(t))
		}
		return summarize(xs)
	}
	actionTiming := []map[string]interface{}{}
	for i, name := range actionNames {
		i := i
		s := collect(func(t runTiming) int64 { return t.actions[i] })
		actionTiming = append(actionTiming, map[string]interface{}{"action": name, "min_ns": s.MinNs, "median_ns": s.MedianNs, "samples_ns": s.Samples})
	}
	session := collect(func(t runTiming) int64 {
		sum := t.open + t.close
		for _, a := range t.actions {
			sum += a
		}
		return sum
	})

	notes := objs.notes
	if notes == nil {
		notes = []string{}
	}
	result := map[string]interface{}{
		"oracle": map[string]interface{}{
			"volcano_commit":           volcanoCommit,
			"volcano_describe":         volcanoDescribe,
			"volcano_date":             volcanoDate,
			"go":                       runtime.Version(),
			"gomaxprocs":               runtime.GOMAXPROCS(0),
			"num_cpu":                  runtime.NumCPU(),
			"tie_break":                *tie,
			"seed":                     *seed,
			"repeat":                   *repeat,
			"percentage_nodes_to_find": *pct,
			"fixes":                    fixList,
		},
		"conf":        map[string]interface{}{"actions": actionNames, "tiers": confTiers},
		"unsupported": notes,
		"timing": map[string]interface{}{
			"parse_ns":      parseNs,
			"cache_build":   collect(func(t runTiming) int64 { return t.cacheBuild }),
			"open_session":  collect(func(t runTiming) int64 { return t.open }),
			"actions":       actionTiming,
			"close_session": collect(func(t runTiming) int64 { return t.close }),
			"session_total": session,
			"session_cpu":   collect(func(t runTiming) int64 { return t.cpu }),
		},
		"counts": map[string]int{
			"binds": len(first.Binds), "pipelined": len(first.Pipelined), "evictions": len(first.Evictions),
			"allocated_not_bound": len(first.Allocated),
			"nodes":               len(objs.nodes), "tasks": len(objs.pods), "jobs": len(objs.pgs),
		},
		"outcomes": digests,
	}
	if *noDecisions {
		result["jobs"] = first.Jobs
	} else {
		result["binds"] = first.Binds
		result["pipelined"] = first.Pipelined
		result["allocated_not_bound"] = first.Allocated
		result["evictions"] = first.Evictions
		result["jobs"] = first.Jobs
		if *withNodes {
			result["nodes"] = first.Nodes
		}
	}
	if *allRuns {
		result["runs"] = runs
	}
	b, err := json.MarshalIndent(result, "", " ")
	fail(err)
	b = append(b, '\n')
	if *out == "-" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	fail(err)
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "volcano-oracle:", err)
		os.Exit(2)
	}
}
