package store

import (
	"strings"
	"testing"
)

// exposition follows the Prometheus text format a JuiceFS client serves
// (https://juicefs.com/docs/community/p8s_metrics/: global labels vol_name
// and mp), with two mounts on one endpoint, a look-alike metric name, a
// label value holding '}' and an escaped quote, and a timestamp.
const exposition = `# HELP juicefs_staging_block_bytes Total bytes of blocks in the staging path.
# TYPE juicefs_staging_block_bytes gauge
juicefs_staging_block_bytes{mp="/jfs/a",vol_name="sandlot"} 8.388608e+06
# HELP juicefs_staging_blocks Number of blocks in the staging path.
# TYPE juicefs_staging_blocks gauge
juicefs_staging_blocks{mp="/jfs/a",vol_name="sandlot"} 2
juicefs_staging_blocks{mp="/jfs/odd}\"name",vol_name="sandlot"} 3 1712345678000
juicefs_staging_blocks_total 100
juicefs_staging_block_delay_seconds 7
`

func TestSumSamples(t *testing.T) {
	for _, tc := range []struct {
		metric string
		want   float64
		found  bool
	}{
		{"juicefs_staging_blocks", 5, true},
		{"juicefs_staging_block_bytes", 8388608, true},
		{"juicefs_staging_blocks_total", 100, true},
		{"juicefs_uptime", 0, false},
	} {
		got, found, err := sumSamples(strings.NewReader(exposition), tc.metric)
		if err != nil || got != tc.want || found != tc.found {
			t.Errorf("%s = %v, %v, %v; want %v, %v", tc.metric, got, found, err, tc.want, tc.found)
		}
	}
	for _, bad := range []string{
		`juicefs_staging_blocks{mp="/jfs" 1`,
		`juicefs_staging_blocks{mp="/jfs"}`,
		`juicefs_staging_blocks one`,
	} {
		if _, _, err := sumSamples(strings.NewReader(bad), "juicefs_staging_blocks"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
