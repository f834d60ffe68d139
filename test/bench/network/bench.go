package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// row is one sandbox of the run: its rules, the name or address it
// connects to, and whether its pod's filter is replaced by a bare forward.
type row struct {
	name       string
	network    *sandlotv1.SandboxNetwork
	target     string
	unfiltered bool
}

// rows: the floor first. Every target is in RangeNet, which the node's
// defaults leave open (public), so "no rules" reaches it too; the rule
// rows close the internet and open only what their rules name.
func rows() []row {
	cidrs := make([]string, 0, 100)
	for i := range 99 { // RFC 2544's benchmark range: never the target
		cidrs = append(cidrs, fmt.Sprintf("198.18.%d.0/24", i))
	}
	cidrs = append(cidrs, inet.IPRange+"/32")
	domains := make([]string, 0, inet.BenchDomains)
	for i := range inet.BenchDomains {
		name, _ := inet.BenchDomain(i)
		domains = append(domains, name)
	}
	last, _ := inet.BenchDomain(inet.BenchDomains - 1)
	closed := ptr.To(false)
	return []row{
		{name: "no filter (bare forward)", target: inet.IPRange, unfiltered: true},
		{name: "no rules", target: inet.IPRange},
		{name: "100 CIDR rules", target: inet.IPRange,
			network: &sandlotv1.SandboxNetwork{AllowInternetAccess: closed, AllowOut: cidrs}},
		{name: "20 domains", target: last,
			network: &sandlotv1.SandboxNetwork{AllowInternetAccess: closed, AllowOut: domains}},
	}
}

// probeArgs shape the measurement: conns connections and runs transfers
// of mib MiB per sandbox in all (runs is also the number of rounds).
type probeArgs struct{ conns, runs, mib int }

type bench struct {
	t     crienv.T
	k     client.WithWatch
	table *stats.Table
	args  probeArgs
}

func newBench(t crienv.T, table *stats.Table, args probeArgs) *bench {
	inet.Start(t)
	_, k := sbxbench.StartCluster(t, 1, func(_ string, o *cluster.Options) {
		o.Prefix = inet.PodPrefix // the test internet's policy route matches the pods
		o.DNS = []string{inet.IPDNS}
	})
	env, err := vmtest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	tpl := &sandlotv1.Template{ObjectMeta: sbxbench.Meta("bench"),
		Spec: sandlotv1.TemplateSpec{Slots: ptr.To[int32](0), // the paths measured start pods (or claim warm pools)
			Image: env.ImageRef, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}}}
	if err := k.Create(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
	if err := sbxtest.WaitBases(context.Background(), k, client.ObjectKeyFromObject(tpl), 1, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	return &bench{t: t, k: k, table: table, args: args}
}

// start creates the row's sandbox and waits until its rules are
// enforced (the floor's then replaced by a bare forward).
func (b *bench) start(r row) *sandlotv1.Sandbox {
	ctx := context.Background()
	name := "net-" + strings.ToLower(strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(r.name))
	sbx := &sandlotv1.Sandbox{ObjectMeta: sbxbench.Meta(name),
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "bench"},
			TimeoutSeconds: ptr.To[int32](sbxbench.Lifetime), Network: r.network}}
	if err := b.k.Create(ctx, sbx); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := b.k.Delete(ctx, sbx); client.IgnoreNotFound(err) == nil {
			_ = sbxbench.Gone(ctx, b.k, sbx)
		}
	})
	s, err := b.applied(ctx, sbx.Name)
	if err != nil {
		b.t.Fatalf("%s: %v", r.name, err)
	}
	if r.unfiltered {
		if err := b.bareForward(ctx, s); err != nil {
			b.t.Fatalf("%s: %v", r.name, err)
		}
	}
	return s
}

// measure runs rounds over every row's sandbox in turn — the machine's
// drift spreads over all rows alike — and adds each row's samples.
func (b *bench) measure(rs []row, sbxs []*sandlotv1.Sandbox, rounds int) {
	got := make([]result, len(rs))
	per := probeArgs{conns: max(1, b.args.conns/rounds), runs: 1, mib: b.args.mib}
	for range rounds {
		for i, r := range rs {
			res, err := b.probe(context.Background(), sbxs[i], r.target, per)
			if err != nil {
				b.t.Fatalf("%s: %v", r.name, err)
			}
			got[i].Connect = append(got[i].Connect, res.Connect...)
			got[i].Mbps = append(got[i].Mbps, res.Mbps...)
		}
	}
	for i, r := range rs {
		b.table.Add(r.name+": connect", "ms", got[i].Connect, "a new TCP connection to "+r.target+", from connect() to established, in the VM")
		b.table.Add(r.name+": throughput", "Mbit/s", got[i].Mbps, fmt.Sprintf("%d MiB over one connection, until the host's answer after EOF", b.args.mib))
	}
}

// applied waits until the sandbox runs with its rules enforced.
func (b *bench) applied(ctx context.Context, name string) (*sandlotv1.Sandbox, error) {
	var s sandlotv1.Sandbox
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := poll.Every(ctx, 200*time.Millisecond, name+" Running with its network applied", func() error {
		if err := b.k.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
			return err
		}
		if err := sbxbench.Ended(&s); err != nil {
			return poll.Stop(err)
		}
		if s.Status.Phase != sandlotv1.SandboxRunning || !networkApplied(&s) {
			return fmt.Errorf("phase %s, generation %d, conditions %+v", s.Status.Phase, s.Generation, s.Status.Conditions)
		}
		return nil
	})
	return &s, err
}

func networkApplied(s *sandlotv1.Sandbox) bool {
	for _, c := range s.Status.Conditions {
		if c.Type == sandlotv1.ConditionNetworkApplied {
			return c.Status == "True" && c.ObservedGeneration >= s.Generation
		}
	}
	return false
}

// result is what probeScript prints.
type result struct {
	Connect []float64 `json:"connect"`
	Mbps    []float64 `json:"mbps"`
	Error   string    `json:"error"`
}

func (b *bench) probe(ctx context.Context, s *sandlotv1.Sandbox, target string, a probeArgs) (result, error) {
	var res result
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := fmt.Sprintf("python3 -c %s %s %d %d %d %d", shellQuote(probeScript), target, inet.SinkPort, a.conns, a.runs, a.mib)
	out, err := sbxtest.Exec(ctx, b.k, s, cmd)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return res, fmt.Errorf("probe printed %q: %w", out, err)
	}
	if res.Error != "" {
		return res, fmt.Errorf("in the VM: %s", res.Error)
	}
	return res, nil
}

// probeScript runs in the VM: it resolves the target once (a domain rule
// opens the answer's addresses), times conns new connections, then runs
// transfers of mib MiB, each ended by the sink's one-byte answer.
const probeScript = `
import json, socket, sys, time
host, port, conns, runs, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = {"connect": [], "mbps": [], "error": ""}
try:
    ip = socket.gethostbyname(host)
    for _ in range(conns):
        t = time.perf_counter()
        s = socket.create_connection((ip, port), timeout=10)
        out["connect"].append((time.perf_counter() - t) * 1000)
        s.close()
    buf = b"\0" * 65536
    for _ in range(runs):
        s = socket.create_connection((ip, port), timeout=60)
        t = time.perf_counter()
        for _ in range(mib * 16):
            s.sendall(buf)
        s.shutdown(socket.SHUT_WR)
        if s.recv(1) != b"k":
            raise RuntimeError("the sink did not answer")
        out["mbps"].append(mib * 8 * 1.048576 / (time.perf_counter() - t))
        s.close()
except Exception as e:
    out["error"] = repr(e)
print(json.dumps(out))
`

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
