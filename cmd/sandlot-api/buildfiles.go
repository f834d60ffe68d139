package main

import (
	"flag"
	"fmt"
	"math"

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

// buildFilesFlags are the bounds on the COPY steps' uploads (e2b's
// buildquota.go).
func buildFilesFlags(fs *flag.FlagSet, cfg *e2b.Config) {
	fs.IntVar(&cfg.MaxBuildFiles, "max-build-files", e2b.DefaultMaxBuildFiles,
		"uploads of COPY steps' files a team may keep (each a ConfigMap of up to 900 KiB in its namespace)")
	fs.Int64Var(&cfg.MaxBuildFilesBytes, "max-build-files-bytes", e2b.DefaultMaxBuildFilesBytes,
		"bytes of uploads of COPY steps' files a team may keep")
	fs.IntVar(&cfg.MaxPendingBuilds, "max-pending-builds", e2b.DefaultMaxPendingBuilds,
		"template builds a team may have requested (POST /v3/templates) and not yet started")
	fs.Float64Var(&cfg.UploadRate, "upload-rate", defaultUploadRate,
		"upload links and uploads a team may ask for a second on average; 0: no limit")
	fs.IntVar(&cfg.UploadBurst, "upload-burst", defaultUploadBurst,
		"upload links and uploads a team may ask for at once (with --upload-rate > 0)")
}

func checkBuildFilesFlags(cfg *e2b.Config) error {
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
