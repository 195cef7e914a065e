// Package dump is the capture and link tools: "softroce dump" captures RoCEv2
// traffic to pcap or decodes a capture (like ibdump and tcpdump), and
// "softroce link" adds, shows and deletes softroce links (like "rdma link").
// Its commands register themselves with the softroce command table.
package dump

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

// registerCmd adds c to this family's commands and to the softroce
// command's (cli.Register).
func registerCmd(c *cli.Command) {
	registered = append(registered, c)
	cli.Register(c)
}
