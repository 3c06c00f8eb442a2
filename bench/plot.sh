# shellcheck shell=bash
# Bar charts for bench/*.sh and scripts/demo.sh (source it): kernel vs librdmasock per
# workload from a data file of lines `"LABEL" KERNEL LIB`, drawn with Debian's gnuplot
# (gnuplot-nox; scripts/install-deps.sh installs it) on a log axis, since the workloads'
# rates differ by 100x.

# bench_plot_bars DATA PNG TITLE YLABEL: write PNG; returns 1 (and says why) without gnuplot.
bench_plot_bars() {
	local data=$1 png=$2 title=$3 ylabel=$4
	if ! command -v gnuplot >/dev/null 2>&1; then
		echo "no chart: gnuplot is not installed (apt-get install gnuplot-nox)" >&2
		return 1
	fi
	gnuplot <<GP
set terminal pngcairo size 1000,560 font "sans,10"
set output "$png"
set title "$title"
set ylabel "$ylabel (log scale)"
set logscale y
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key top left
set grid ytics
set xtics rotate by -20 noenhanced
set yrange [1000:*]
set offsets 0, 0, graph 0.12, 0
set format y "%.0f"
plot "$data" using 2:xtic(1) title "kernel TCP (no library)" lc rgb "#7f7f7f", \
     "" using 3 title "librdmasock" lc rgb "#1f77b4", \
     "" using 0:3:(sprintf("%.2fx", \$3/\$2)) with labels offset 1.8,0.7 notitle
GP
}
