package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// ScrapeInterval is the server's: short, for a run of minutes.
const ScrapeInterval = 5 * time.Second

// Job is a set of HTTPS targets scraped alike (one component's pods).
type Job struct {
	Name    string
	Targets []string // host:port
}

// Server is a Prometheus server scraping the jobs.
type Server struct {
	addr string
	cmd  *exec.Cmd
	done chan error
}

// Start runs bin with its data and config under dir, scraping each job
// over HTTPS with token (the components' certificates are self-signed:
// not verified, as the chart's ServiceMonitor does), and waits until it
// is ready.
func Start(ctx context.Context, bin, dir string, jobs []Job, token string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config(dir, jobs)), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{addr: addr, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); log.Close() }()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, fmt.Errorf("prometheus (log %s): %w", log.Name(), err)
	}
	return s, nil
}

// config is the scrape configuration: one job per component.
func config(dir string, jobs []Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n", ScrapeInterval, ScrapeInterval)
	for _, j := range jobs {
		fmt.Fprintf(&b, "- job_name: %q\n  scheme: https\n  authorization:\n    credentials_file: %q\n"+
			"  tls_config:\n    insecure_skip_verify: true\n  static_configs:\n  - targets: [%s]\n",
			j.Name, filepath.Join(dir, "token"), quoteAll(j.Targets))
	}
	return b.String()
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return poll.Until(ctx, "prometheus ready", func() error {
		select {
		case err := <-s.done:
			return poll.Stop(fmt.Errorf("exited: %v", err))
		default:
		}
		resp, err := http.Get("http://" + s.addr + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
}

// Stop ends the server.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// WaitScraped waits until every target was scraped after t: the run's
// last samples are in.
func (s *Server) WaitScraped(ctx context.Context, t time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return poll.Until(ctx, "a scrape of every target after "+t.Format(time.TimeOnly), func() error {
		now := time.Now()
		series, err := s.QueryRange(ctx, "min(timestamp(up))", now, now, time.Second)
		if err != nil {
			return err
		}
		if len(series) == 0 || len(series[0].Values) == 0 || series[0].Values[0] < float64(t.Unix()) {
			return fmt.Errorf("not yet: %v", series)
		}
		return nil
	})
}

// Series is one series of a range query: its labels and points.
type Series struct {
	Labels map[string]string
	Times  []time.Time
	Values []float64
}

// QueryRange evaluates expr over [start, end] every step.
func (s *Server) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	q := url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)}, "step": {step.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	return decodeMatrix(body, expr)
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// decodeMatrix reads the API's answer to a range query.
func decodeMatrix(body []byte, expr string) ([]Series, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	out := make([]Series, 0, len(r.Data.Result))
	for _, res := range r.Data.Result {
		s := Series{Labels: res.Metric}
		for _, v := range res.Values {
			ts, ok1 := v[0].(float64)
			str, ok2 := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if !ok1 || !ok2 || err != nil {
				return nil, errors.New("query " + strconv.Quote(expr) + ": a point is not [time, \"value\"]")
			}
			s.Times = append(s.Times, time.UnixMilli(int64(ts*1000)))
			s.Values = append(s.Values, f)
		}
		out = append(out, s)
	}
	return out, nil
}
