package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/sandlot-dev/sandlot/e2b"
)

// The default upload limit: a build's COPY steps each ask for a link and
// upload, at once (40: twenty steps), then a team may go on at 2 a second,
// which is at most 900 KiB a second into etcd; the bounds on what a team
// keeps hold whatever the rate.
const (
	defaultUploadRate  = 2
	defaultUploadBurst = 40
)

// A build's sandboxes are as large as the operator lets a tenant make
// them: 8 vCPU and 16 GiB unless the chart's api.buildResources says.
const (
	defaultMaxBuildVCPU      = 8
	defaultMaxBuildMemoryMiB = 16384
)

// buildFilesFlags are the bounds on the COPY steps' uploads (e2b's
// buildquota.go).
func buildFilesFlags(fs *flag.FlagSet, cfg *e2b.Config) {
	fs.IntVar(&cfg.MaxBuildFiles, "max-build-files", e2b.DefaultMaxBuildFiles,
		"uploads of COPY steps' files a team may keep (each a ConfigMap of up to 900 KiB in its namespace)")
	fs.Int64Var(&cfg.MaxBuildFilesBytes, "max-build-files-bytes", e2b.DefaultMaxBuildFilesBytes,
		"bytes of uploads of COPY steps' files a team may keep")
	fs.IntVar(&cfg.MaxPendingBuilds, "max-pending-builds", e2b.DefaultMaxPendingBuilds,
		"template builds a team may have requested (POST /v3/templates) and not yet started")
	cfg.MaxBuildVCPU, cfg.MaxBuildMemoryMiB = defaultMaxBuildVCPU, defaultMaxBuildMemoryMiB
	fs.Func("max-build-vcpu", fmt.Sprintf("vCPU a template built through the API may give each sandbox (default %d)", defaultMaxBuildVCPU),
		int32Flag(&cfg.MaxBuildVCPU))
	fs.Func("max-build-memory-mib", fmt.Sprintf("memory (MiB) a template built through the API may give each sandbox (default %d)",
		defaultMaxBuildMemoryMiB), int32Flag(&cfg.MaxBuildMemoryMiB))
	fs.Float64Var(&cfg.UploadRate, "upload-rate", defaultUploadRate,
		"upload links and uploads a team may ask for a second on average; 0: no limit")
	fs.IntVar(&cfg.UploadBurst, "upload-burst", defaultUploadBurst,
		"upload links and uploads a team may ask for at once (with --upload-rate > 0)")
}

func int32Flag(p *int32) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		*p = int32(n)
		return err
	}
}

func checkBuildFilesFlags(cfg *e2b.Config) error {
	if cfg.MaxBuildVCPU < 1 || cfg.MaxBuildMemoryMiB < 64 {
		return fmt.Errorf("--max-build-vcpu %d, --max-build-memory-mib %d: want at least 1 and 64", cfg.MaxBuildVCPU, cfg.MaxBuildMemoryMiB)
	}
	if cfg.MaxBuildFiles < 1 || cfg.MaxBuildFilesBytes < 1 || cfg.MaxPendingBuilds < 1 {
		return fmt.Errorf("--max-build-files %d, --max-build-files-bytes %d, --max-pending-builds %d: want each at least 1",
			cfg.MaxBuildFiles, cfg.MaxBuildFilesBytes, cfg.MaxPendingBuilds)
	}
	if cfg.UploadRate < 0 || math.IsNaN(cfg.UploadRate) || math.IsInf(cfg.UploadRate, 0) {
		return fmt.Errorf("--upload-rate %v: want a number of uploads a second, 0 for no limit", cfg.UploadRate)
	}
	if cfg.UploadRate > 0 && cfg.UploadBurst < 1 {
		return fmt.Errorf("--upload-burst %d: want at least 1 with --upload-rate %v", cfg.UploadBurst, cfg.UploadRate)
	}
	return nil
}
