package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The JuiceFS client's count of failed object requests
// (https://juicefs.com/docs/community/p8s_metrics/).
const metricObjectErrors = "juicefs_object_request_errors"

// stagedBytes is the disk this node's staged blocks take.
func (j *JuiceFS) stagedBytes() (int64, error) { return stagingBytes(j.cfg.StagingDir) }

// scrape sums every sample of metric at MetricsURL (one per mount the
// endpoint serves, labelled vol_name and mp); a missing metric is an error.
func (j *JuiceFS) scrape(ctx context.Context, metric string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.cfg.MetricsURL, nil)
	if err != nil {
		return 0, fmt.Errorf("juicefs metrics: %w", err)
	}
	resp, err := j.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("juicefs metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("juicefs metrics: GET %s: %s", j.cfg.MetricsURL, resp.Status)
	}
	v, found, err := sumSamples(resp.Body, metric)
	if err != nil {
		return 0, fmt.Errorf("juicefs metrics %s: %w", j.cfg.MetricsURL, err)
	}
	if !found {
		return 0, fmt.Errorf("juicefs metrics %s: no %s (is it a JuiceFS client?)", j.cfg.MetricsURL, metric)
	}
	return v, nil
}

// sumSamples adds up the samples of metric in the Prometheus text
// exposition format: `name{label="value",...} value [timestamp]`.
func sumSamples(r io.Reader, metric string) (sum float64, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := splitMetricName(line)
		if name != metric {
			continue
		}
		v, err := sampleValue(rest)
		if err != nil {
			return 0, false, fmt.Errorf("%q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}

func splitMetricName(line string) (name, rest string) {
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return line, ""
	}
	return line[:i], line[i:]
}

// sampleValue parses what follows a metric name: optional labels, then
// the value. Label values are quoted and may hold '}' and escapes.
func sampleValue(rest string) (float64, error) {
	rest = strings.TrimLeft(rest, " \t")
	if strings.HasPrefix(rest, "{") {
		end, err := labelsEnd(rest)
		if err != nil {
			return 0, err
		}
		rest = rest[end:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return 0, errors.New("no value")
	}
	return strconv.ParseFloat(fields[0], 64)
}

// labelsEnd is the index just past the '}' closing the label set at s[0].
func labelsEnd(s string) (int, error) {
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++ // escaped character
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i + 1, nil
		}
	}
	return 0, errors.New("unterminated label set")
}

// stagingBytes sums the allocated bytes of the blocks in a client's
// staging directory (<cache-dir>/<UUID>/rawstaging/chunks/..., one file
// per block, plus ".tmp" files being written). The directory
// itself appears with the first staged block, but its parent (the
// cache's <UUID> dir) must exist, or StagingDir is wrong and "nothing
// staged" would be a lie.
func stagingBytes(dir string) (bytes int64, err error) {
	if _, err := os.Stat(filepath.Dir(dir)); err != nil {
		return 0, fmt.Errorf("juicefs staging dir %s: %w (want <cache-dir>/<UUID>/rawstaging of this mount)", dir, err)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // uploaded (removed) while walking, or no staging yet
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			bytes += allocated(p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("juicefs staging dir %s: %w", dir, err)
	}
	return bytes, nil
}
