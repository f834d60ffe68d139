package inet

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sandlot-dev/sandlot/internal/socksserver"
	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// The SOCKS5 host: a proxy on IPSocks:SocksPort (username SocksUser,
// password SocksPassword) that resolves names with the test internet's
// zone, as a remote-DNS proxy would, and answers on port 80 with the
// CONNECTs it served (JSON: [{Domain, Host, Port}]), which the egress
// proxy tests read from the host.
const (
	IPSocks       = "198.51.100.40"
	SocksPort     = 1080
	SocksUser     = "sandlot"
	SocksPassword = "socks-pass"
	// IPNoSocks answers nothing on SocksPort: a proxy that is down.
	IPNoSocks = "198.51.100.41"
)

func (x *Internet) serveSocks() error {
	srv := &socksserver.Server{Username: SocksUser, Password: SocksPassword,
		Dial: func(network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip, ok := Zone[strings.ToLower(host)+"."]; ok {
				host = ip
			}
			return (&net.Dialer{Timeout: 5 * time.Second}).Dial(network, net.JoinHostPort(host, port))
		}}
	var proxyL, logL net.Listener
	err := podnet.Run(x.NsPath(), func() (err error) {
		if proxyL, err = x.listen(net.JoinHostPort(IPSocks, "1080")); err != nil {
			return err
		}
		logL, err = x.listen(net.JoinHostPort(IPSocks, "80"))
		return err
	})
	if err != nil {
		return err
	}
	go srv.Serve(proxyL)
	logSrv := &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(srv.Requests())
		})}
	go func() { _ = logSrv.Serve(logL) }()
	x.closers = append(x.closers, logSrv.Close)
	return nil
}
