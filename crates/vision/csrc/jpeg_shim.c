/* torchlight-vision's shim over libjpeg(-turbo)'s decompression API: errors come back as
 * return codes and messages (setjmp/longjmp; libjpeg's default error_exit would call exit()),
 * warnings are counted and the first few kept, and images decode to RGB8 with libjpeg's
 * defaults, which are Pillow's (islow DCT, fancy upsampling), whole or one rectangle of them. */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#define TL_MESSAGE_LEN 200
#define TL_WARNINGS_LEN 400
/* Rows read per jpeg_read_scanlines call. */
#define TL_BATCH 16

/* What the header says, and what went wrong. Mirrored by `ShimInfo` in src/jpeg.rs. */
typedef struct {
    unsigned int width;
    unsigned int height;
    int components;
    /* libjpeg's J_COLOR_SPACE guess for the file (1 grayscale, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK). */
    int color_space;
    int progressive;
    /* The iMCU size in pixels (8 x the largest sampling factors). */
    int imcu_width;
    int imcu_height;
    int warnings;
    char error[TL_MESSAGE_LEN];
    char warning_text[TL_WARNINGS_LEN];
} tl_jpeg_info;

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    tl_jpeg_info *info;
} tl_error_mgr;

static void tl_error_exit(j_common_ptr cinfo) {
    tl_error_mgr *err = (tl_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->info->error);
    longjmp(err->jump, 1);
}

static void tl_emit_message(j_common_ptr cinfo, int level) {
    tl_error_mgr *err = (tl_error_mgr *)cinfo->err;
    if (level >= 0) return; /* trace messages */
    err->info->warnings++;
    size_t used = strlen(err->info->warning_text);
    if (err->info->warnings <= 3 && used + 2 < TL_WARNINGS_LEN) {
        char message[JMSG_LENGTH_MAX];
        (*cinfo->err->format_message)(cinfo, message);
        snprintf(err->info->warning_text + used, TL_WARNINGS_LEN - used, "%s%s", used ? "; " : "", message);
    }
}

static void tl_output_message(j_common_ptr cinfo) { (void)cinfo; }

/* The libjpeg-turbo version this shim was compiled against, e.g. "2.1.5" (or "" for IJG's). */
const char *tl_jpeg_version(void) {
#ifdef LIBJPEG_TURBO_VERSION
#define TL_STR2(x) #x
#define TL_STR(x) TL_STR2(x)
    return TL_STR(LIBJPEG_TURBO_VERSION);
#else
    return "";
#endif
}

static void fill_info(j_decompress_ptr cinfo, tl_jpeg_info *info) {
    info->width = cinfo->image_width;
    info->height = cinfo->image_height;
    info->components = cinfo->num_components;
    info->color_space = (int)cinfo->jpeg_color_space;
    info->progressive = cinfo->progressive_mode ? 1 : 0;
    info->imcu_width = cinfo->max_h_samp_factor * DCTSIZE;
    info->imcu_height = cinfo->max_v_samp_factor * DCTSIZE;
}

/* Points `cinfo`'s error handling at `err` (messages into `info`, which is cleared). */
static void tl_init(j_decompress_ptr cinfo, tl_error_mgr *err, tl_jpeg_info *info) {
    memset(info, 0, sizeof *info);
    cinfo->err = jpeg_std_error(&err->pub);
    err->pub.error_exit = tl_error_exit;
    err->pub.emit_message = tl_emit_message;
    err->pub.output_message = tl_output_message;
    err->info = info;
}

/* Creates the decompressor over `data` and reads the header into `info`. Called after the
 * caller's setjmp: libjpeg's errors jump back there. */
static void tl_open(j_decompress_ptr cinfo, const unsigned char *data, size_t len, tl_jpeg_info *info) {
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, data, (unsigned long)len);
    jpeg_read_header(cinfo, TRUE);
    fill_info(cinfo, info);
}

/* Pillow's (a * b) / 255, rounded: MULDIV255 of its ImagingUtils.h. */
static unsigned int tl_muldiv255(unsigned int a, unsigned int b) {
    unsigned int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* `w` pixels of libjpeg's CMYK output to RGB as PIL makes them: Pillow reads a CMYK JPEG's
 * values inverted (Adobe's convention), then cmyk2rgb gives 255 - k - c * (255 - k) / 255 per
 * channel, all on the inverted values (with nk = 255 - k' = libjpeg's k). */
static void tl_cmyk_row(unsigned char *out, const unsigned char *in, unsigned int w) {
    for (unsigned int x = 0; x < w; x++, in += 4, out += 3) {
        unsigned int nk = in[3];
        for (int c = 0; c < 3; c++) {
            int v = (int)nk - (int)tl_muldiv255(255u - in[c], nk);
            out[c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* Reads the header of `data` into `info` and, unless `header_only`, decodes the rectangle
 * (`x`, `y`, `w`, `h`) to RGB8 rows in `out` (`out_len` bytes), each `stride` bytes after the
 * previous one (w * 3 for packed rows). Grayscale files are
 * replicated to three channels, RGB files kept, YCbCr files converted, CMYK and YCCK files
 * converted as Pillow converts them (tl_cmyk_row); other colour spaces return -2. The rows and columns decoded are the rectangle
 * widened by one iMCU on each side (clipped to the image), so fancy upsampling sees the same
 * neighbours as in a full decode; the rectangle is then cut out. 0 on success, -1 with
 * `info->error` set. */
static int tl_run(const unsigned char *data, size_t len, unsigned int x, unsigned int y, unsigned int w,
                  unsigned int h, unsigned char *out, size_t stride, size_t out_len, tl_jpeg_info *info,
                  int header_only) {
    struct jpeg_decompress_struct cinfo;
    tl_error_mgr err;
    tl_init(&cinfo, &err, info);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    tl_open(&cinfo, data, len, info);
    if (header_only) {
        jpeg_destroy_decompress(&cinfo);
        return 0;
    }
    /* Four-component files decode to CMYK (libjpeg turns YCCK into CMYK), which is converted
     * to RGB row by row as Pillow converts them: its JPEG reader assumes Adobe's inverted
     * values ("CMYK;I"), then convert("RGB") applies cmyk2rgb. */
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    if (!(cinfo.jpeg_color_space == JCS_GRAYSCALE || cinfo.jpeg_color_space == JCS_RGB ||
          cinfo.jpeg_color_space == JCS_YCbCr || cmyk)) {
        jpeg_destroy_decompress(&cinfo);
        return -2;
    }
    if (w == 0 || h == 0 || x > cinfo.image_width - w || w > cinfo.image_width || y > cinfo.image_height - h ||
        h > cinfo.image_height) {
        snprintf(info->error, TL_MESSAGE_LEN, "rectangle %ux%u at (%u, %u) is not inside the %ux%u image", w, h,
                 x, y, cinfo.image_width, cinfo.image_height);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (stride < (size_t)w * 3 || (size_t)(h - 1) * stride + (size_t)w * 3 > out_len) {
        snprintf(info->error, TL_MESSAGE_LEN, "a %ux%u rectangle does not fit %zu bytes with rows %zu apart", w, h,
                 out_len, stride);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);

    unsigned int col0 = 0;
    int full_width = x == 0 && w == cinfo.image_width;
    if (!full_width) {
        unsigned int margin = (unsigned int)info->imcu_width;
        unsigned int left = x > margin ? x - margin : 0;
        unsigned int right = x + w + margin < cinfo.image_width ? x + w + margin : cinfo.image_width;
        JDIMENSION xoffset = left, width = right - left;
        if (left != 0 || right != cinfo.image_width) {
            jpeg_crop_scanline(&cinfo, &xoffset, &width);
        }
        col0 = x - xoffset;
    }
    /* Rows are read TL_BATCH at a time: one at a time would make libjpeg copy each row group of
     * a 2-row upsampler through a spare row. Rows inside the rectangle are read straight into
     * `out` when the decoded width is the rectangle's (no column offset); others go through
     * `scratch`, from libjpeg's pool, so a longjmp out of the decoder frees it with the rest. */
    JSAMPARRAY scratch = (*cinfo.mem->alloc_sarray)(
        (j_common_ptr)&cinfo, JPOOL_IMAGE, cinfo.output_width * (JDIMENSION)cinfo.output_components, TL_BATCH);
    JSAMPROW targets[TL_BATCH];
    int direct = !cmyk && col0 == 0 && cinfo.output_width == w;
    unsigned int margin = (unsigned int)info->imcu_height;
    unsigned int first = y > margin ? y - margin : 0;
    if (first > 0) {
        jpeg_skip_scanlines(&cinfo, first);
    }
    while (cinfo.output_scanline < y + h) {
        unsigned int line = cinfo.output_scanline;
        unsigned int want = y + h - line < TL_BATCH ? y + h - line : TL_BATCH;
        /* Before the rectangle, stop at its first row, so that batch is all inside. */
        if (line < y && y - line < want) want = y - line;
        int into_out = direct && line >= y;
        for (unsigned int i = 0; i < want; i++) {
            targets[i] = into_out ? out + (size_t)(line + i - y) * stride : scratch[i];
        }
        JDIMENSION got = jpeg_read_scanlines(&cinfo, targets, want);
        if (got == 0) {
            snprintf(info->error, TL_MESSAGE_LEN, "the decoder stopped at row %u of %u", line, y + h);
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
        if (!into_out) {
            for (unsigned int i = 0; i < got; i++) {
                if (line + i < y) continue;
                if (cmyk) {
                    tl_cmyk_row(out + (size_t)(line + i - y) * stride, scratch[i] + (size_t)col0 * 4, w);
                } else {
                    memcpy(out + (size_t)(line + i - y) * stride, scratch[i] + (size_t)col0 * 3, (size_t)w * 3);
                }
            }
        }
    }
    if (cinfo.output_scanline == cinfo.output_height) {
        jpeg_finish_decompress(&cinfo);
    } else {
        jpeg_abort_decompress(&cinfo);
    }
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

/* Reads the header of `data` into `info`. 0 on success, -1 with `info->error` set. */
int tl_jpeg_header(const unsigned char *data, size_t len, tl_jpeg_info *info) {
    return tl_run(data, len, 0, 0, 0, 0, NULL, 0, 0, info, 1);
}

/* Decodes the rectangle (`x`, `y`, `w`, `h`) of `data` to RGB8 rows in `out`: see tl_run. */
int tl_jpeg_decode(const unsigned char *data, size_t len, unsigned int x, unsigned int y, unsigned int w,
                   unsigned int h, unsigned char *out, size_t stride, size_t out_len, tl_jpeg_info *info) {
    return tl_run(data, len, x, y, w, h, out, stride, out_len, info, 0);
}

/* Decodes the whole of `data` as libtiff's JPEG codec decodes a TIFF strip or tile, into
 * `out` (`out_len` bytes, rows packed): `ycbcr` nonzero converts YCbCr to RGB (a YCbCr TIFF,
 * which Pillow has libtiff decode with JPEGCOLORMODE_RGB), else the components come out as
 * stored, with no colour conversion (libtiff's JCS_UNKNOWN), `info->components` per pixel.
 * Components stored at lower resolution without `ycbcr` return -2 (libtiff hands those back
 * as raw, unexpanded data). 0 on success, -1 with `info->error` set. */
int tl_jpeg_decode_tiff(const unsigned char *data, size_t len, int ycbcr, unsigned char *out, size_t out_len,
                        tl_jpeg_info *info) {
    struct jpeg_decompress_struct cinfo;
    tl_error_mgr err;
    tl_init(&cinfo, &err, info);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    tl_open(&cinfo, data, len, info);
    if (ycbcr) {
        if (cinfo.num_components != 3) {
            snprintf(info->error, TL_MESSAGE_LEN, "a YCbCr JPEG strip with %d components", cinfo.num_components);
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
        cinfo.jpeg_color_space = JCS_YCbCr;
        cinfo.out_color_space = JCS_RGB;
    } else {
        for (int c = 0; c < cinfo.num_components; c++) {
            if (cinfo.comp_info[c].h_samp_factor != cinfo.max_h_samp_factor ||
                cinfo.comp_info[c].v_samp_factor != cinfo.max_v_samp_factor) {
                jpeg_destroy_decompress(&cinfo);
                return -2;
            }
        }
        cinfo.jpeg_color_space = JCS_UNKNOWN;
        cinfo.out_color_space = JCS_UNKNOWN;
    }
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    size_t row = (size_t)cinfo.output_width * (size_t)cinfo.output_components;
    info->components = cinfo.output_components;
    if (row * cinfo.output_height > out_len) {
        snprintf(info->error, TL_MESSAGE_LEN, "a %ux%u JPEG strip does not fit %zu bytes", cinfo.output_width,
                 cinfo.output_height, out_len);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW target = out + (size_t)cinfo.output_scanline * row;
        if (jpeg_read_scanlines(&cinfo, &target, 1) == 0) {
            snprintf(info->error, TL_MESSAGE_LEN, "the decoder stopped at row %u of %u", cinfo.output_scanline,
                     cinfo.output_height);
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return 0;
}
