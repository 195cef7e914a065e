package devinfo

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

func init() {
	registerCmd(&cli.Command{Name: "devinfo", Summary: "print device and port attributes, like ibv_devinfo", Run: runDevinfo})
}

const devinfoUsage = `Usage: softroce devinfo [-d NAME] [-i PORT] [-l] [-v]

Prints the attributes of softroce devices in the layout of rdma-core's
ibv_devinfo. Without -d every link is shown (or the default loopback device
when there are no links).

  -d, --ib-dev=NAME    a link, netdev or IP address (default all links)
  -i, --ib-port=PORT   show only this port (softroce devices have port 1)
  -l, --list           print only the device names
  -v, --verbose        print all attributes, the device limits and the GID table
`

func runDevinfo(args []string, stdout, stderr io.Writer) int {
	g := cli.Getopt{Prog: "softroce devinfo"}
	var dev string
	var port int
	var list, verbose bool
	g.Str('d', "ib-dev", &dev)
	g.NumIn('i', "ib-port", &port, 1, 255)
	g.Flag('l', "list", &list)
	g.Flag('v', "verbose", &verbose)
	ops, code, ok := g.ParseArgs(args, stdout, stderr, func(w io.Writer) { fmt.Fprint(w, devinfoUsage) })
	if !ok {
		return code
	}
	if len(ops) > 0 {
		return cli.UsageErr(stderr, g.Prog, "unexpected argument %q", ops[0])
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	var devs []toolkit.Device
	if dev != "" {
		d, err := toolkit.ResolveDevice(dev)
		if err != nil {
			fmt.Fprintf(stderr, "devinfo: %v\n", err)
			return 1
		}
		devs = append(devs, d)
	} else {
		var err error
		devs, err = allToolDevices()
		if err != nil {
			fmt.Fprintf(stderr, "devinfo: %v\n", err)
			return 1
		}
	}
	if list {
		s := "s"
		if len(devs) == 1 {
			s = ""
		}
		fmt.Fprintf(stdout, "%d HCA%s found:\n", len(devs), s)
		for _, d := range devs {
			fmt.Fprintf(stdout, "\t%s\n", d.Name)
		}
		fmt.Fprintln(stdout)
		return 0
	}
	rc := 0
	for _, d := range devs {
		if err := printDevinfo(stdout, d, port, verbose); err != nil {
			fmt.Fprintf(stderr, "devinfo: %s: %v\n", d.Name, err)
			rc = 1
		}
	}
	return rc
}

// allToolDevices lists every link (the ones that resolve) or, with no
// links, the default device.
func allToolDevices() ([]toolkit.Device, error) {
	st, err := toolkit.LoadState()
	if err != nil {
		return nil, err
	}
	if len(st.Links) == 0 {
		d, err := toolkit.ResolveDevice("")
		if err != nil {
			return nil, err
		}
		return []toolkit.Device{d}, nil
	}
	var out []toolkit.Device
	var firstErr error
	for _, l := range st.Links {
		d, err := toolkit.ResolveDevice(l.Name)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

// describeDevice opens d's engine on an in-memory endpoint with d's address
// and its netdev's MTU: the attributes are the ones a real open would
// report, without binding UDP 4791 (which a running tool may hold).
func describeDevice(d toolkit.Device) (*verbs.Device, error) {
	mtu := 1500
	if ifc, err := net.InterfaceByName(d.Netdev); err == nil && ifc.MTU > 0 {
		mtu = min(max(ifc.MTU, 576), 65536)
	}
	a := d.Addr
	if a.Port() == 0 {
		a = netip.AddrPortFrom(a.Addr(), wire.UDPPort)
	}
	var peer netip.AddrPort
	if a.Addr().Unmap().Is4() {
		peer = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 1}), wire.UDPPort)
	} else {
		peer = netip.AddrPortFrom(netip.MustParseAddr("2001:db8::1"), wire.UDPPort)
	}
	ea, eb, err := pipe.New(pipe.Config{Addr: netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port()), MTU: mtu},
		pipe.Config{Addr: peer, MTU: mtu})
	if err != nil {
		return nil, err
	}
	eb.Close()
	return verbs.Open(ea, &verbs.Config{Name: d.Name, MAC: toolkit.DeviceMAC(d.Netdev), Logger: toolkit.Logger})
}

func devinfoGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func printDevinfo(w io.Writer, d toolkit.Device, onlyPort int, verbose bool) error {
	vd, err := describeDevice(d)
	if err != nil {
		return err
	}
	defer vd.Close()
	a := vd.QueryDevice()
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("hca_id:\t%s\n", d.Name)
	p("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0)
	p("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	p("\tnode_guid:\t\t\t%s\n", devinfoGUID(a.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", devinfoGUID(a.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		p("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		p("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		p("\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
		for _, f := range deviceCapFlagNames {
			if a.DeviceCapFlags&f.bit != 0 {
				p("\t\t\t\t\t%s\n", f.name)
			}
		}
		if rest := a.DeviceCapFlags &^ knownDeviceCapFlags; rest != 0 {
			p("\t\t\t\t\tUnknown flags: 0x%x\n", rest)
		}
		p("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		p("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		p("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		p("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		p("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		p("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		p("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		p("\tmax_ee_rd_atom:\t\t\t%d\n", a.MaxEECRdAtom)
		p("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
		p("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		p("\tmax_ee_init_rd_atom:\t\t%d\n", 0)
		p("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapName(a.AtomicCap), a.AtomicCap)
		// Fields softroce has no notion of (EE contexts, RDDs, memory
		// windows, raw QPs, multicast, FMRs) are 0, as on rxe where noted.
		p("\tmax_ee:\t\t\t\t%d\n", 0)
		p("\tmax_rdd:\t\t\t%d\n", 0)
		p("\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		p("\tmax_raw_ipv6_qp:\t\t%d\n", 0)
		p("\tmax_raw_ethy_qp:\t\t%d\n", 0)
		p("\tmax_mcast_grp:\t\t\t%d\n", 0)
		p("\tmax_mcast_qp_attach:\t\t%d\n", 0)
		p("\tmax_total_mcast_qp_attach:\t%d\n", 0)
		p("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		p("\tmax_fmr:\t\t\t%d\n", 0)
		p("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			p("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			p("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
		p("\tgeneral_odp_caps:\n")
		for _, t := range []string{"rc", "uc", "ud", "xrc"} {
			p("\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
		}
		p("\tcompletion_timestamp_mask not supported\n")
		p("\tcore clock not supported\n")
		p("\tdevice_cap_flags_ex:\t\t0x%X\n", a.DeviceCapFlags)
		p("\ttso_caps:\n\t\tmax_tso:\t\t\t0\n")
		p("\trss_caps:\n")
		p("\t\tmax_rwq_indirection_tables:\t\t\t0\n")
		p("\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
		p("\t\trx_hash_function:\t\t\t\t0x0\n")
		p("\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
		p("\tmax_wq_type_rq:\t\t\t0\n")
		p("\tpacket_pacing_caps:\n")
		p("\t\tqp_rate_limit_min:\t0kbps\n")
		p("\t\tqp_rate_limit_max:\t0kbps\n")
		p("\ttag matching not supported\n")
		p("\tnum_comp_vectors:\t\t1\n")
	}
	found := false
	for port := 1; port <= int(a.PhysPortCnt); port++ {
		if onlyPort != 0 && port != onlyPort {
			continue
		}
		found = true
		pa, err := vd.QueryPort(uint8(port))
		if err != nil {
			w.Write([]byte(b.String()))
			return fmt.Errorf("Failed to query port %d props: %w", port, err)
		}
		p("\t\tport:\t%d\n", port)
		p("\t\t\tstate:\t\t\t%s (%d)\n", portStateName(pa.State), pa.State)
		p("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuName(pa.MaxMTU), pa.MaxMTU)
		p("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuName(pa.ActiveMTU), pa.ActiveMTU)
		p("\t\t\tsm_lid:\t\t\t%d\n", 0)
		p("\t\t\tport_lid:\t\t%d\n", 0)
		p("\t\t\tport_lmc:\t\t0x%02x\n", 0)
		p("\t\t\tlink_layer:\t\t%s\n", linkLayerName(pa.LinkLayer))
		if verbose {
			p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSz)
			p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
			p("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
			p("\t\t\tmax_vl_num:\t\t%s (%d)\n", "1", 1)
			st := vd.Stats()
			p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", st.DropPKey.Load())
			p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", st.DropQKey.Load())
			p("\t\t\tsm_sl:\t\t\t%d\n", 0)
			p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			p("\t\t\tsubnet_timeout:\t\t%d\n", 0)
			p("\t\t\tinit_type_reply:\t%d\n", 0)
			p("\t\t\tactive_width:\t\t%sX (%d)\n", widthName(pa.ActiveWidth), pa.ActiveWidth)
			p("\t\t\tactive_speed:\t\t%s (%d)\n", speedName(pa.ActiveSpeed), pa.ActiveSpeed)
			p("\t\t\tphys_state:\t\t%s (%d)\n", physStateName(pa.PhysState), pa.PhysState)
			for i := 0; i < pa.GIDTblLen; i++ {
				g, err := vd.QueryGID(uint8(port), i)
				if err != nil {
					break
				}
				if g == (verbs.GID{}) {
					continue
				}
				p("\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, netip.AddrFrom16(g))
			}
		}
		p("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no port %d (softroce devices have port 1)", onlyPort)
	}
	return nil
}

var deviceCapFlagNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"}, {1 << 1, "BAD_PKEY_CNTR"}, {1 << 2, "BAD_QKEY_CNTR"}, {1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"}, {1 << 5, "CHANGE_PHY_PORT"}, {1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"}, {1 << 8, "SHUTDOWN_PORT"}, {1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"}, {1 << 11, "SYS_IMAGE_GUID"}, {1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"}, {1 << 14, "N_NOTIFY_CQ"}, {1 << 17, "MEM_WINDOW"}, {1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"}, {1 << 21, "MEM_MGT_EXTENSIONS"}, {1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"}, {1 << 25, "RC_IP_CSUM"}, {1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

var knownDeviceCapFlags = func() uint32 {
	var m uint32
	for _, f := range deviceCapFlagNames {
		m |= f.bit
	}
	return m
}()

func atomicCapName(c uint8) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

func portStateName(s verbs.PortState) string {
	switch s {
	case verbs.PortDown:
		return "PORT_DOWN"
	case verbs.PortInit:
		return "PORT_INIT"
	case verbs.PortArmed:
		return "PORT_ARMED"
	case verbs.PortActive:
		return "PORT_ACTIVE"
	case 5:
		return "PORT_ACTIVE_DEFER"
	}
	return "invalid state"
}

func mtuName(m verbs.MTU) string {
	if m.Valid() {
		return fmt.Sprint(m.Bytes())
	}
	return "invalid MTU"
}

func linkLayerName(l uint8) string {
	switch l {
	case 0, 1:
		return "InfiniBand"
	case 2:
		return "Ethernet"
	}
	return "Unknown"
}

func widthName(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

func speedName(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

func physStateName(s uint8) string {
	names := [...]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING",
		5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return "invalid physical state"
}
