// test_xyz.cpp: extended XYZ reader on the shared data files and on small malformed inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "io/xyz.h"
}

#ifndef CGQ_SHARED_DATA_DIR
#define CGQ_SHARED_DATA_DIR "../shared/data"
#endif

namespace {

std::string shared_path(const char *name) { return std::string(CGQ_SHARED_DATA_DIR) + "/" + name; }

// Reads every frame of an open stream; stops at the first failure (status and message kept).
struct ReadAll {
    std::vector<cgq_frame> frames;
    cgq_status status = CGQ_STATUS_OK;
    std::string message;
    int64_t line_no = 0;

    void run(FILE *f, const char *source) {
        for (;;) {
            cgq_frame fr;
            std::memset(&fr, 0, sizeof fr);
            int eof = 0;
            status = cgq_xyz_read_frame(f, source, &line_no, &fr, &eof);
            if (status != CGQ_STATUS_OK) {
                message = cgq_last_error();
                // A failed read must leave the frame untouched (nothing to free).
                EXPECT_EQ(fr.atomic_numbers, nullptr);
                EXPECT_EQ(fr.positions, nullptr);
                return;
            }
            if (eof) return;
            frames.push_back(fr);
        }
    }
    ~ReadAll() {
        for (auto &fr : frames) cgq_frame_free(&fr);
    }
};

// Parses an in-memory file through fmemopen, as if it were "test.xyz".
void read_string(const std::string &text, ReadAll &out) {
    FILE *f = fmemopen(const_cast<char *>(text.data()), text.size(), "r");
    ASSERT_NE(f, nullptr);
    out.run(f, "test.xyz");
    std::fclose(f);
}

// Expects BAD_INPUT with every listed fragment in the message.
void expect_bad(const std::string &text, std::initializer_list<const char *> fragments) {
    ReadAll r;
    read_string(text, r);
    EXPECT_EQ(r.status, CGQ_STATUS_BAD_INPUT) << "input:\n" << text;
    for (const char *frag : fragments)
        EXPECT_NE(r.message.find(frag), std::string::npos)
            << "message '" << r.message << "' lacks '" << frag << "'";
}

int count_z(const cgq_frame &fr, int32_t z) {
    int n = 0;
    for (int64_t i = 0; i < fr.n_atoms; i++) n += fr.atomic_numbers[i] == z;
    return n;
}

FILE *open_shared(const char *name) { return std::fopen(shared_path(name).c_str(), "r"); }

}  // namespace

// ---- periodic table ------------------------------------------------------------------------------

TEST(Elements, SymbolsRoundTrip) {
    for (int32_t z = 1; z <= 118; z++) EXPECT_EQ(cgq_element_z(cgq_element_symbol(z)), z) << z;
    EXPECT_EQ(cgq_element_z("H"), 1);
    EXPECT_EQ(cgq_element_z("C"), 6);
    EXPECT_EQ(cgq_element_z("O"), 8);
    EXPECT_EQ(cgq_element_z("Cl"), 17);
    EXPECT_EQ(cgq_element_z("Fe"), 26);
    EXPECT_EQ(cgq_element_z("U"), 92);
    EXPECT_EQ(cgq_element_z("Og"), 118);
    EXPECT_STREQ(cgq_element_symbol(1), "H");
    EXPECT_STREQ(cgq_element_symbol(118), "Og");
    EXPECT_STREQ(cgq_element_symbol(0), "X");
    EXPECT_STREQ(cgq_element_symbol(119), "X");
    EXPECT_STREQ(cgq_element_symbol(-1), "X");
}

TEST(Elements, CaseTolerantAndUnknown) {
    EXPECT_EQ(cgq_element_z("CL"), 17);
    EXPECT_EQ(cgq_element_z("cl"), 17);
    EXPECT_EQ(cgq_element_z("co"), 27);
    EXPECT_EQ(cgq_element_z("h"), 1);
    EXPECT_EQ(cgq_element_z("Xx"), 0);
    EXPECT_EQ(cgq_element_z("X"), 0);
    EXPECT_EQ(cgq_element_z(""), 0);
    EXPECT_EQ(cgq_element_z(nullptr), 0);
    EXPECT_EQ(cgq_element_z("H1"), 0);
    EXPECT_EQ(cgq_element_z("Hee"), 0);
}

// ---- real data files -----------------------------------------------------------------------------

TEST(XyzFiles, WaterTrain) {
    FILE *f = open_shared("water_train.xyz");
    if (!f) GTEST_SKIP() << "missing " << shared_path("water_train.xyz");
    ReadAll r;
    r.run(f, "water_train.xyz");
    std::fclose(f);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 10u);
    EXPECT_EQ(r.line_no, 10 * 194);
    for (const auto &fr : r.frames) {
        EXPECT_EQ(fr.n_atoms, 192);
        EXPECT_EQ(count_z(fr, 8), 64);
        EXPECT_EQ(count_z(fr, 1), 128);
        EXPECT_EQ(fr.has_lattice, 1);
        EXPECT_EQ(fr.pbc[0], 1);
        EXPECT_EQ(fr.pbc[1], 1);
        EXPECT_EQ(fr.pbc[2], 1);
        EXPECT_DOUBLE_EQ(fr.cell[3], -0.00000053);  // slightly triclinic as written
        EXPECT_DOUBLE_EQ(fr.cell[1], 0.0);
    }
    const cgq_frame &first = r.frames.front(), &last = r.frames.back();
    EXPECT_EQ(first.atomic_numbers[0], 8);
    EXPECT_DOUBLE_EQ(first.positions[0], 6.20507905);
    EXPECT_DOUBLE_EQ(first.positions[1], 7.72080133);
    EXPECT_DOUBLE_EQ(first.positions[2], 13.40638711);
    const double c0[9] = {12.41720144, 0, 0, -0.00000053, 12.41720144, 0, -0.00000053, -0.00000053, 12.41720144};
    for (int k = 0; k < 9; k++) EXPECT_DOUBLE_EQ(first.cell[k], c0[k]) << k;
    EXPECT_DOUBLE_EQ(r.frames[8].cell[0], 12.70659787);
    EXPECT_DOUBLE_EQ(last.cell[0], 12.72529900);
    EXPECT_DOUBLE_EQ(last.cell[8], 12.72529900);
    EXPECT_EQ(last.atomic_numbers[191], 1);
    EXPECT_DOUBLE_EQ(last.positions[191 * 3 + 0], 4.19688858);
    EXPECT_DOUBLE_EQ(last.positions[191 * 3 + 1], 12.57362093);
    EXPECT_DOUBLE_EQ(last.positions[191 * 3 + 2], 5.18579907);
    // Positions are unwrapped (outside the box) in this file; the reader keeps them as written.
    EXPECT_DOUBLE_EQ(first.positions[191 * 3 + 1], -1.87549928);
}

TEST(XyzFiles, SolventLiquid) {
    FILE *f = open_shared("solvent_liquid.xyz");
    if (!f) GTEST_SKIP() << "missing " << shared_path("solvent_liquid.xyz");
    ReadAll r;
    r.run(f, "solvent_liquid.xyz");
    std::fclose(f);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    const cgq_frame &fr = r.frames[0];
    EXPECT_EQ(fr.n_atoms, 160);
    EXPECT_EQ(count_z(fr, 6), 44);
    EXPECT_EQ(count_z(fr, 1), 80);
    EXPECT_EQ(count_z(fr, 8), 36);
    EXPECT_EQ(fr.has_lattice, 1);
    for (int k = 0; k < 3; k++) EXPECT_EQ(fr.pbc[k], 1);
    for (int k = 0; k < 9; k++) EXPECT_DOUBLE_EQ(fr.cell[k], k % 4 == 0 ? 12.85369 : 0.0) << k;
    EXPECT_EQ(fr.atomic_numbers[0], 6);
    EXPECT_DOUBLE_EQ(fr.positions[0], 10.49052625);
    EXPECT_DOUBLE_EQ(fr.positions[1], 5.10664893);
    EXPECT_DOUBLE_EQ(fr.positions[2], 1.11195987);
    EXPECT_EQ(fr.atomic_numbers[159], 1);
    EXPECT_DOUBLE_EQ(fr.positions[159 * 3 + 0], 9.47137002);
    EXPECT_DOUBLE_EQ(fr.positions[159 * 3 + 1], 9.02067467);
    EXPECT_DOUBLE_EQ(fr.positions[159 * 3 + 2], 12.17632624);
}

// 3 isolated-atom frames (H, C, O; Lattice 20 A box but pbc F F F) then 200 molecules without
// Lattice whose Properties put molID:I:1 between pos and forces_xtb.
TEST(XyzFiles, SolventXtbTrain) {
    FILE *f = open_shared("solvent_xtb_train_200.xyz");
    if (!f) GTEST_SKIP() << "missing " << shared_path("solvent_xtb_train_200.xyz");
    ReadAll r;
    r.run(f, "solvent_xtb_train_200.xyz");
    std::fclose(f);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 203u);
    EXPECT_EQ(r.line_no, 6215);
    const int32_t isolated[3] = {1, 6, 8};
    int64_t total = 0;
    for (size_t i = 0; i < r.frames.size(); i++) {
        const cgq_frame &fr = r.frames[i];
        total += fr.n_atoms;
        for (int k = 0; k < 3; k++) EXPECT_EQ(fr.pbc[k], 0) << i;
        EXPECT_EQ(count_z(fr, 1) + count_z(fr, 6) + count_z(fr, 8), fr.n_atoms) << i;
        if (i < 3) {
            EXPECT_EQ(fr.n_atoms, 1);
            EXPECT_EQ(fr.atomic_numbers[0], isolated[i]);
            EXPECT_EQ(fr.has_lattice, 1);
            for (int k = 0; k < 9; k++) EXPECT_DOUBLE_EQ(fr.cell[k], k % 4 == 0 ? 20.0 : 0.0);
        } else {
            EXPECT_GE(fr.n_atoms, 8) << i;
            EXPECT_EQ(fr.has_lattice, 0) << i;
            for (int k = 0; k < 9; k++) EXPECT_EQ(fr.cell[k], 0.0);
        }
    }
    EXPECT_EQ(total, 3 + 5806);
    const cgq_frame &mol = r.frames[3];
    EXPECT_EQ(mol.n_atoms, 24);
    EXPECT_EQ(mol.atomic_numbers[0], 6);
    EXPECT_DOUBLE_EQ(mol.positions[0], 0.45285612);
    EXPECT_DOUBLE_EQ(mol.positions[1], 3.01426506);
    EXPECT_DOUBLE_EQ(mol.positions[2], -2.32330513);
    const cgq_frame &last = r.frames.back();
    EXPECT_EQ(last.n_atoms, 15);
    EXPECT_EQ(last.atomic_numbers[14], 1);
    EXPECT_DOUBLE_EQ(last.positions[14 * 3 + 0], -1.08666301);
    EXPECT_DOUBLE_EQ(last.positions[14 * 3 + 1], 1.77247131);
    EXPECT_DOUBLE_EQ(last.positions[14 * 3 + 2], -2.89902663);
}

// ---- well-formed variants ------------------------------------------------------------------------

TEST(XyzParse, PlainXyzWithoutProperties) {
    ReadAll r;
    read_string("2\nwater fragment\nO 0 0 0\nH 0.96 0 0 extra columns are ignored\n", r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    const cgq_frame &fr = r.frames[0];
    EXPECT_EQ(fr.n_atoms, 2);
    EXPECT_EQ(fr.has_lattice, 0);
    for (int k = 0; k < 3; k++) EXPECT_EQ(fr.pbc[k], 0);
    for (int k = 0; k < 9; k++) EXPECT_EQ(fr.cell[k], 0.0);
    EXPECT_EQ(fr.atomic_numbers[1], 1);
    EXPECT_DOUBLE_EQ(fr.positions[3], 0.96);
}

TEST(XyzParse, AtomicNumberSpecies) {
    ReadAll r;
    read_string("3\nProperties=species:S:1:pos:R:3\n8 0 0 0\n1 1 0 0\nCl 0 1 0\n", r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_EQ(r.frames[0].atomic_numbers[0], 8);
    EXPECT_EQ(r.frames[0].atomic_numbers[1], 1);
    EXPECT_EQ(r.frames[0].atomic_numbers[2], 17);
}

TEST(XyzParse, ZColumnAndPositionsName) {
    ReadAll r;
    read_string("2\nProperties=id:I:1:Z:I:1:positions:R:3:forces:R:3\n"
                "7 6 1.5 2.5 3.5 9 9 9\n8 1 -1 -2 -3 9 9 9\n",
                r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_EQ(r.frames[0].atomic_numbers[0], 6);
    EXPECT_EQ(r.frames[0].atomic_numbers[1], 1);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[0], 1.5);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[5], -3.0);
}

TEST(XyzParse, SkipsDeclaredColumnsOfEveryType) {
    ReadAll r;
    read_string("1\nProperties=tag:L:1:charges:R:1:species:S:1:vel:R:3:pos:R:3:idx:I:2\n"
                "T -0.5 Na 1 2 3 4.25 5.5 6.75 10 11\n",
                r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_EQ(r.frames[0].atomic_numbers[0], 11);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[0], 4.25);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[1], 5.5);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[2], 6.75);
}

TEST(XyzParse, PbcVariants) {
    const char *lat = "Lattice=\"5 0 0 0 6 0 0 0 7\" ";
    struct Case {
        std::string pbc;
        int32_t want[3];
    } cases[] = {
        {"", {1, 1, 1}},
        {"pbc=\"T T F\"", {1, 1, 0}},
        {"pbc=\"True False True\"", {1, 0, 1}},
        {"pbc=\"1 0 0\"", {1, 0, 0}},
        {"pbc=\"F F F\"", {0, 0, 0}},
        {"PBC=\"t f T\"", {1, 0, 1}},
        {"pbc=[True, True, False]", {1, 1, 0}},
        {"pbc=F", {0, 0, 0}},
    };
    for (const auto &c : cases) {
        ReadAll r;
        read_string("1\n" + std::string(lat) + c.pbc + "\nH 0 0 0\n", r);
        ASSERT_EQ(r.status, CGQ_STATUS_OK) << c.pbc << ": " << r.message;
        ASSERT_EQ(r.frames.size(), 1u);
        for (int k = 0; k < 3; k++) EXPECT_EQ(r.frames[0].pbc[k], c.want[k]) << c.pbc << " " << k;
        EXPECT_EQ(r.frames[0].has_lattice, 1);
        EXPECT_DOUBLE_EQ(r.frames[0].cell[4], 6.0);
    }
    ReadAll none;
    read_string("1\npbc=\"F F F\"\nH 0 0 0\n", none);
    ASSERT_EQ(none.status, CGQ_STATUS_OK) << none.message;
    EXPECT_EQ(none.frames[0].has_lattice, 0);
}

TEST(XyzParse, CommentKeysQuotingAndCase) {
    // Lower-case keys, spaces around '=', bare flags, quoted values containing '=' and escaped
    // quotes, and a key that merely contains "Lattice" must not confuse the parser.
    ReadAll r;
    read_string("1\nconfig_type=\"a = b\" isolated lattice = \"2 0 0 0 3 0 0 0 4\" "
                "name=\"say \\\"hi\\\"\" myLattice=\"junk\" energy=-1.5 "
                "properties=species:S:1:pos:R:3 flag\n"
                "He 0.25 0.5 0.75\n",
                r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    const cgq_frame &fr = r.frames[0];
    EXPECT_EQ(fr.has_lattice, 1);
    EXPECT_DOUBLE_EQ(fr.cell[0], 2.0);
    EXPECT_DOUBLE_EQ(fr.cell[4], 3.0);
    EXPECT_DOUBLE_EQ(fr.cell[8], 4.0);
    EXPECT_EQ(fr.atomic_numbers[0], 2);
    EXPECT_DOUBLE_EQ(fr.positions[2], 0.75);
}

TEST(XyzParse, CrlfMultiFrameBlankLinesAndNoFinalNewline) {
    ReadAll r;
    read_string("\r\n2\r\nLattice=\"4 0 0 0 4 0 0 0 4\" pbc=\"T T T\"\r\nH 0 0 0\r\nH 0.7 0 0\r\n"
                "\r\n  1  \r\ncomment\r\nO 1 2 3",
                r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 2u);
    EXPECT_EQ(r.frames[0].n_atoms, 2);
    EXPECT_DOUBLE_EQ(r.frames[0].cell[8], 4.0);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[3], 0.7);
    EXPECT_EQ(r.frames[1].n_atoms, 1);
    EXPECT_EQ(r.frames[1].atomic_numbers[0], 8);
    EXPECT_DOUBLE_EQ(r.frames[1].positions[2], 3.0);
    EXPECT_EQ(r.frames[1].has_lattice, 0);
    EXPECT_EQ(r.line_no, 9);
}

TEST(XyzParse, TrailingBlankLinesAndEmptyFile) {
    ReadAll r;
    read_string("1\nx\nH 0 0 0\n\n   \n\t\n", r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    EXPECT_EQ(r.frames.size(), 1u);

    ReadAll empty;
    read_string("", empty);
    EXPECT_EQ(empty.status, CGQ_STATUS_OK);
    EXPECT_EQ(empty.frames.size(), 0u);
}

TEST(XyzParse, ZeroAtomFrame) {
    ReadAll r;
    read_string("0\nLattice=\"3 0 0 0 3 0 0 0 3\"\n1\n\nC 0 0 0\n", r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 2u);
    EXPECT_EQ(r.frames[0].n_atoms, 0);
    EXPECT_EQ(r.frames[0].has_lattice, 1);
    EXPECT_EQ(r.frames[1].n_atoms, 1);
    EXPECT_EQ(r.frames[1].atomic_numbers[0], 6);
}

TEST(XyzParse, VeryLongCommentLine) {
    std::string comment = "Lattice=\"9 0 0 0 9 0 0 0 9\"";
    for (int i = 0; i < 2000; i++) comment += " key" + std::to_string(i) + "=\"some value\"";
    comment += " Properties=species:S:1:pos:R:3";
    ASSERT_GT(comment.size(), 20000u);
    std::string atom = "C 1 2 3" + std::string(10000, ' ') + "\n";
    ReadAll r;
    read_string("1\n" + comment + "\n" + atom, r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_DOUBLE_EQ(r.frames[0].cell[8], 9.0);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[2], 3.0);
}

TEST(XyzParse, ManyAtomsGrowArrays) {
    const int n = 5000;
    std::string text = std::to_string(n) + "\n\n";
    for (int i = 0; i < n; i++) text += "H " + std::to_string(i) + " 0 0\n";
    ReadAll r;
    read_string(text, r);
    ASSERT_EQ(r.status, CGQ_STATUS_OK) << r.message;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_DOUBLE_EQ(r.frames[0].positions[3 * (n - 1)], n - 1.0);
}

TEST(XyzParse, FrameFreeZeroes) {
    ReadAll r;
    read_string("1\n\nH 0 0 0\n", r);
    ASSERT_EQ(r.frames.size(), 1u);
    cgq_frame fr = r.frames[0];
    r.frames.clear();
    cgq_frame_free(&fr);
    EXPECT_EQ(fr.n_atoms, 0);
    EXPECT_EQ(fr.positions, nullptr);
    EXPECT_EQ(fr.atomic_numbers, nullptr);
    cgq_frame_free(&fr);  // freeing twice is harmless
    cgq_frame_free(nullptr);
}

TEST(XyzParse, EofLeavesFrameUntouched) {
    FILE *f = fmemopen(const_cast<char *>("\n\n"), 2, "r");
    ASSERT_NE(f, nullptr);
    cgq_frame fr;
    std::memset(&fr, 0, sizeof fr);
    fr.n_atoms = 42;
    int eof = 0;
    int64_t line = 0;
    EXPECT_EQ(cgq_xyz_read_frame(f, "blank.xyz", &line, &fr, &eof), CGQ_STATUS_OK);
    EXPECT_EQ(eof, 1);
    EXPECT_EQ(fr.n_atoms, 42);
    std::fclose(f);
}

// ---- malformed input -----------------------------------------------------------------------------

TEST(XyzMalformed, BadCountLine) {
    expect_bad("abc\n\nH 0 0 0\n", {"test.xyz:1:", "'abc'", "atom count"});
    expect_bad("-3\n\n", {"test.xyz:1:", "atom count"});
    expect_bad("2.0\n\n", {"test.xyz:1:"});
    expect_bad("2 atoms\n\n", {"test.xyz:1:", "alone"});
    expect_bad("99999999999999999999\n\n", {"test.xyz:1:"});
    // The error comes from the second frame: line numbers continue across frames.
    expect_bad("1\n\nH 0 0 0\n\nX\n", {"test.xyz:5:", "'X'"});
}

TEST(XyzMalformed, TruncatedFrames) {
    expect_bad("3\nLattice=\"3 0 0 0 3 0 0 0 3\"\nH 0 0 0\nH 1 0 0\n",
               {"test.xyz:5:", "truncated", "2 of 3"});
    expect_bad("3\n", {"test.xyz:2:", "truncated"});
    expect_bad("1\n\nH 0 0 0\n2\ncomment\nO 0 0 0\n", {"test.xyz:7:", "truncated", "1 of 2"});
    // A huge count in a short file is reported as truncated, not as an allocation failure.
    expect_bad("2000000000\n\nH 0 0 0\n", {"truncated", "1 of 2000000000"});
}

TEST(XyzMalformed, BadNumbers) {
    expect_bad("1\n\nH 0.0 abc 1.0\n", {"test.xyz:3:", "atom 1", "position y", "'abc'"});
    expect_bad("1\n\nH 0.0 1.0 1.0.0\n", {"test.xyz:3:", "position z"});
    expect_bad("1\n\nH nan 1.0 1.0\n", {"test.xyz:3:", "finite"});
    expect_bad("1\n\nH 1 inf 1.0\n", {"test.xyz:3:", "finite"});
    expect_bad("1\n\nH 1 2 1e999\n", {"test.xyz:3:", "finite"});
}

TEST(XyzMalformed, BadLattice) {
    expect_bad("1\nLattice=\"1 0 0 0 1 0 0 0 nan\"\nH 0 0 0\n", {"test.xyz:2:", "Lattice", "'nan'"});
    expect_bad("1\nLattice=\"1 0 0 0 1 0 0 0 inf\"\nH 0 0 0\n", {"test.xyz:2:", "finite"});
    expect_bad("1\nLattice=\"1 0 0 0 1 0 0 0\"\nH 0 0 0\n", {"test.xyz:2:", "8 numbers", "expected 9"});
    expect_bad("1\nLattice=\"1 0 0 0 1 0 0 0 1 0\"\nH 0 0 0\n", {"test.xyz:2:", "more than 9"});
    expect_bad("1\nLattice=\"1 0 0 0 1 0 0 0 x\"\nH 0 0 0\n", {"test.xyz:2:", "'x'"});
    expect_bad("1\nLattice\nH 0 0 0\n", {"test.xyz:2:", "no value"});
}

TEST(XyzMalformed, BadPbc) {
    const std::string lat = "Lattice=\"3 0 0 0 3 0 0 0 3\" ";
    expect_bad("1\n" + lat + "pbc=\"T T X\"\nH 0 0 0\n", {"test.xyz:2:", "pbc", "'X'"});
    expect_bad("1\n" + lat + "pbc=\"T T\"\nH 0 0 0\n", {"test.xyz:2:", "2 values"});
    expect_bad("1\n" + lat + "pbc=\"T T T T\"\nH 0 0 0\n", {"test.xyz:2:", "pbc"});
    expect_bad("1\npbc=\"T T F\"\nH 0 0 0\n", {"test.xyz:2:", "no Lattice"});
}

TEST(XyzMalformed, ColumnCounts) {
    const std::string props = "Properties=species:S:1:pos:R:3:forces:R:3\n";
    expect_bad("2\n" + props + "H 0 0 0 1 1 1\nH 0 0 0\n",
               {"test.xyz:4:", "atom 2", "4 columns", "expected 7"});
    expect_bad("1\n" + props + "H 0 0 0 1 1 1 1\n", {"test.xyz:3:", "8 columns", "expected 7"});
    expect_bad("1\n\nH 0 0\n", {"test.xyz:3:", "3 columns", "expected 4"});
    expect_bad("2\n\nH 0 0 0\n\n", {"test.xyz:4:", "0 columns"});
}

TEST(XyzMalformed, UnknownElement) {
    expect_bad("1\n\nXx 0 0 0\n", {"test.xyz:3:", "'Xx'", "element symbol"});
    expect_bad("1\n\n0 0 0 0\n", {"test.xyz:3:", "'0'"});
    expect_bad("1\n\n119 0 0 0\n", {"test.xyz:3:", "'119'"});
    expect_bad("1\n\nH2 0 0 0\n", {"test.xyz:3:", "'H2'"});
    expect_bad("1\nProperties=Z:I:1:pos:R:3\nH 0 0 0\n", {"test.xyz:3:", "'H'", "Z column"});
}

TEST(XyzMalformed, BadProperties) {
    expect_bad("1\nProperties=species:S:1\nH\n", {"test.xyz:2:", "no positions"});
    expect_bad("1\nProperties=pos:R:3\n0 0 0\n", {"test.xyz:2:", "no species"});
    expect_bad("1\nProperties=species:S:1:pos:R:2\nH 0 0\n", {"test.xyz:2:", "pos:R:3"});
    expect_bad("1\nProperties=species:S:1:pos:X:3\nH 0 0 0\n", {"test.xyz:2:", "type 'X'"});
    expect_bad("1\nProperties=species:S:1:pos:R\nH 0 0 0\n", {"test.xyz:2:", "ends inside"});
    expect_bad("1\nProperties=species:S:1:pos:R:three\nH 0 0 0\n", {"test.xyz:2:", "'three'"});
    expect_bad("1\nProperties=\"\"\nH 0 0 0\n", {"test.xyz:2:", "no value"});
}

TEST(XyzMalformed, InvalidArguments) {
    int eof = 0;
    cgq_frame fr;
    std::memset(&fr, 0, sizeof fr);
    EXPECT_EQ(cgq_xyz_read_frame(nullptr, "x", nullptr, &fr, &eof), CGQ_STATUS_INVALID_ARGUMENT);
}
