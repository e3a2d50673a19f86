package robustness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
	"go.etcd.io/etcd/tests/v3/robustness/validate"
)

// Save writes a run's client reports where report.LoadClientReports reads
// them back (client-N/operations.json and watch.json, JSON lines, as etcd's
// robustness suite saves a failed run), the persisted requests to
// requests.json and the validators' configuration to validate.json: what
// a failed run leaves to look at, and what Load gives the validators
// again.
func Save(dir string, reports []report.ClientReport, persisted []model.EtcdRequest, cfg validate.Config) error {
	for _, r := range reports {
		cdir := filepath.Join(dir, fmt.Sprintf("client-%d", r.ClientID))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return err
		}
		ops := make([]any, len(r.KeyValue))
		for i, op := range r.KeyValue {
			ops[i] = op
		}
		watches := make([]any, len(r.Watch))
		for i, w := range r.Watch {
			watches[i] = w
		}
		if err := writeLines(filepath.Join(cdir, "operations.json"), ops); err != nil {
			return err
		}
		if err := writeLines(filepath.Join(cdir, "watch.json"), watches); err != nil {
			return err
		}
	}
	for name, v := range map[string]any{"requests.json": persisted, "validate.json": cfg} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Load reads what Save wrote.
func Load(dir string) (reports []report.ClientReport, persisted []model.EtcdRequest, cfg validate.Config, err error) {
	if reports, err = report.LoadClientReports(dir); err != nil {
		return nil, nil, cfg, err
	}
	for name, v := range map[string]any{"requests.json": &persisted, "validate.json": &cfg} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, cfg, err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return nil, nil, cfg, fmt.Errorf("%s: %w", name, err)
		}
	}
	return reports, persisted, cfg, nil
}

func writeLines(path string, vs []any) error {
	if len(vs) == 0 {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
