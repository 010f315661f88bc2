/* Small inline SVG charts for the HTML report: line plots over steps and
 * grouped bar charts, with axis ticks, labels and a legend. No scripts, no
 * external references (the <svg> carries no xmlns: it is inline HTML).
 *
 * Non-finite values are gaps (a line breaks there; an isolated point is a
 * dot). On a log axis, values <= 0 sit on a line labelled "0" one decade
 * below the lowest positive value. Pixel positions come from the engine's
 * own logarithm (dl_log), so a page renders to the same bytes anywhere. */
#ifndef DLC_SVG_PLOT_H
#define DLC_SVG_PLOT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct dlc_plot_series {
  const char *name; /* legend entry */
  const double *y;  /* n values */
  int64_t n;
  int64_t x0; /* line plots: x of y[0]; y[i] is at x0 + i */
  bool dashed;
  const char *color; /* "#rrggbb"; NULL: the palette colour of its index */
  /* Line plots, optional: n values each, the band the series should keep
   * to (a calibrated golden's envelope). It is shaded behind the lines
   * (class "band"); values outside it are circled in red (class
   * "outside", one per pixel column, a tooltip with step and bounds). */
  const double *band_lo, *band_hi;
} dlc_plot_series;

typedef struct dlc_plot {
  const char *title, *xlabel, *ylabel;
  bool logy;
  int width, height; /* of the plotting frame with its axes; 0: 640 x 260 */
  /* Optional (limit_label not NULL): a dashed red line across the frame at
   * y = limit, labelled (class "limit"), such as a gate; bars above it are
   * drawn red (class "over"). */
  const char *limit_label;
  double limit;
} dlc_plot;

/* Palette colour i (cycles). */
const char *dlc_plot_color(int i);

/* Lines of series against x; longer series than there are pixels are
 * reduced to each pixel column's minimum and maximum. */
void dlc_svg_lines(FILE *f, const dlc_plot *p, const dlc_plot_series *s, int ns);

/* Grouped bars: category c has one bar per series, of height s[g].y[c]
 * (each series has n == ncat values). */
void dlc_svg_bars(FILE *f, const dlc_plot *p, const char *const *categories, int ncat,
                  const dlc_plot_series *s, int ns);

#endif
