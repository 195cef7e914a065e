// Package dump is the capture and link tools: "softroce dump" captures RoCEv2
// traffic to pcap or decodes a capture (like ibdump and tcpdump), and
// "softroce link" adds, shows and deletes softroce links (like "rdma link").
// Commands returns them for the softroce command table.
package dump

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the dump and link commands.
func Commands() []*cli.Command { return registered }
