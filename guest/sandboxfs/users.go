package sandboxfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// User is an account of the sandbox's /etc/passwd.
type User struct {
	Name  string
	UID   uint32
	GID   uint32
	Home  string // inside the sandbox
	Shell string
}

// LookupUser finds name in the root's /etc/passwd. "root" always exists.
func (r Root) LookupUser(name string) (User, error) {
	f, err := os.Open(filepath.Join(r.Dir, "etc", "passwd"))
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if u, ok := parsePasswd(sc.Text()); ok && u.Name == name {
				return u, nil
			}
		}
	}
	if name == "root" {
		return User{Name: "root", Home: "/root", Shell: "/bin/sh"}, nil
	}
	return User{}, fmt.Errorf("user %q does not exist in the sandbox", name)
}

// GroupName returns the name of gid in the root's /etc/group, or the
// number.
func (r Root) GroupName(gid uint32) string {
	return lookupName(filepath.Join(r.Dir, "etc", "group"), gid)
}

// UserName returns the name of uid in the root's /etc/passwd, or the
// number.
func (r Root) UserName(uid uint32) string {
	return lookupName(filepath.Join(r.Dir, "etc", "passwd"), uid)
}

func lookupName(file string, id uint32) string {
	if f, err := os.Open(file); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 3 && fields[2] == strconv.FormatUint(uint64(id), 10) {
				return fields[0]
			}
		}
	}
	if id == 0 {
		return "root"
	}
	return strconv.FormatUint(uint64(id), 10)
}

func parsePasswd(line string) (User, bool) {
	f := strings.Split(line, ":")
	if len(f) < 7 || strings.HasPrefix(line, "#") {
		return User{}, false
	}
	uid, err1 := strconv.ParseUint(f[2], 10, 32)
	gid, err2 := strconv.ParseUint(f[3], 10, 32)
	if err1 != nil || err2 != nil {
		return User{}, false
	}
	return User{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5], Shell: f[6]}, true
}
