package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/internal/docschema"
	"reeve.dev/reeve/server/sdk"
)

// LoadProjectAccess reads dir/.reeve/access.yaml as the rule that governs
// the project's sessions (sdk.ProjectAccess, the one definition the daemon
// and the control plane both apply); nil when the project has none. A
// file that cannot be read or does not validate gives a ProjectAccess
// whose Invalid names its first problems: access is then refused rather
// than guessed. `reeve check` validates the same file with ValidateAccess.
func LoadProjectAccess(dir string) *sdk.ProjectAccess {
	file := filepath.Join(dir, ".reeve", "access.yaml")
	data, problems, err := readDocument(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &sdk.ProjectAccess{Invalid: fmt.Sprintf("read %s: %v", file, err)}
	}
	if len(problems) == 0 {
		problems = ValidateAccess(file, data)
	}
	if len(problems) > 0 {
		msg := make([]string, 0, 3)
		for i, p := range problems {
			if i == 3 {
				msg = append(msg, fmt.Sprintf("and %d more", len(problems)-3))
				break
			}
			msg = append(msg, p.String())
		}
		return &sdk.ProjectAccess{Invalid: fmt.Sprintf("%s is not valid (reeve check): %s", file, strings.Join(msg, "; "))}
	}
	var a sdk.ProjectAccess
	if err := decodeYAML(file, data, &a); err != nil {
		return &sdk.ProjectAccess{Invalid: err.Error()}
	}
	if a.Members == nil {
		a.Members = []sdk.ProjectAccessMember{}
	}
	return &a
}

// decodeYAML reads a validated document into v through its JSON form.
func decodeYAML(file string, data []byte, v any) error {
	d, problems := docschema.ParseYAML(file, data)
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s", file, problems[0].String())
	}
	b, err := json.Marshal(d.Value)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
