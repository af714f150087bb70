"""The hand-written tasks of nodus/python-functions 1.0.0: 40 train and 16 test functions to implement.

Who uses it: `python_functions_env` turns each entry into a prompt (signature, description, one example)
and an answer (the calls and expected results the grader checks); the catalog tests run every
`solution` against its calls to prove the expected results right. Written for nodus; every call and
result is JSON-shaped (lists, not tuples; string keys), because the runner returns JSON-decoded values.
"""

from __future__ import annotations

from typing import Any

Task = dict[str, Any]


def _task(signature: str, description: str, calls: list[list[Any]], expected: list[Any], solution: str) -> Task:
    function = signature.removeprefix("def ").split("(", 1)[0]
    return {
        "function": function,
        "signature": signature,
        "description": description,
        "calls": calls,
        "expected": expected,
        "solution": solution.strip() + "\n",
    }


TRAIN: list[Task] = [
    _task(
        "def reverse_words(s: str) -> str:",
        "Return the words of `s` in reverse order, joined by single spaces. Words are separated by any whitespace.",
        [["hello world"], ["  one two   three "], ["single"], [""], ["a b c d"]],
        ["world hello", "three two one", "single", "", "d c b a"],
        """
def reverse_words(s: str) -> str:
    return " ".join(reversed(s.split()))
""",
    ),
    _task(
        "def is_palindrome(s: str) -> bool:",
        "Return True when `s` reads the same forwards and backwards, ignoring case and every character "
        "that is not a letter or a digit.",
        [["A man, a plan, a canal: Panama"], ["racecar"], ["hello"], [""], ["No 'x' in Nixon"], ["ab2a"]],
        [True, True, False, True, True, False],
        """
def is_palindrome(s: str) -> bool:
    kept = [c.lower() for c in s if c.isalnum()]
    return kept == kept[::-1]
""",
    ),
    _task(
        "def count_vowels(s: str) -> int:",
        "Return how many characters of `s` are vowels (a, e, i, o, u), in upper or lower case.",
        [["Hello World"], ["rhythm"], ["AEIOUaeiou"], [""], ["Programming in Python"]],
        [3, 0, 10, 0, 5],
        """
def count_vowels(s: str) -> int:
    return sum(1 for c in s.lower() if c in "aeiou")
""",
    ),
    _task(
        "def fizzbuzz(n: int) -> list[str]:",
        'Return the strings for 1 to n: "Fizz" for multiples of 3, "Buzz" for multiples of 5, "FizzBuzz" for '
        "multiples of both, and the number itself otherwise.",
        [[5], [15], [1], [0]],
        [
            ["1", "2", "Fizz", "4", "Buzz"],
            ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz", "11", "Fizz", "13", "14", "FizzBuzz"],
            ["1"],
            [],
        ],
        """
def fizzbuzz(n: int) -> list[str]:
    out = []
    for i in range(1, n + 1):
        word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
        out.append(word or str(i))
    return out
""",
    ),
    _task(
        "def factorial(n: int) -> int:",
        "Return n! for n >= 0 (0! is 1).",
        [[0], [1], [5], [10], [20]],
        [1, 1, 120, 3628800, 2432902008176640000],
        """
def factorial(n: int) -> int:
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result
""",
    ),
    _task(
        "def fibonacci(n: int) -> int:",
        "Return the n-th Fibonacci number, where fibonacci(0) is 0 and fibonacci(1) is 1.",
        [[0], [1], [2], [10], [50]],
        [0, 1, 1, 55, 12586269025],
        """
def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
""",
    ),
    _task(
        "def is_prime(n: int) -> bool:",
        "Return True when n is a prime number. Numbers below 2 are not prime.",
        [[2], [1], [0], [-7], [17], [21], [7919], [7917]],
        [True, False, False, False, True, False, True, False],
        """
def is_prime(n: int) -> bool:
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
""",
    ),
    _task(
        "def gcd(a: int, b: int) -> int:",
        "Return the greatest common divisor of a and b (non-negative integers, not both zero).",
        [[12, 18], [17, 5], [0, 9], [100, 75], [48, 180]],
        [6, 1, 9, 25, 12],
        """
def gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a
""",
    ),
    _task(
        "def flatten(nested: list) -> list:",
        "Return the non-list items of `nested` in order, however deeply lists are nested inside it.",
        [[[1, [2, [3, 4]], 5]], [[]], [[[[]], ["a"], [["b", ["c"]]]]], [[1, 2, 3]]],
        [[1, 2, 3, 4, 5], [], ["a", "b", "c"], [1, 2, 3]],
        """
def flatten(nested: list) -> list:
    out = []
    for item in nested:
        if isinstance(item, list):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
""",
    ),
    _task(
        "def chunk(items: list, size: int) -> list[list]:",
        "Split `items` into consecutive lists of `size` items; the last list may be shorter.",
        [[[1, 2, 3, 4, 5], 2], [[1, 2, 3], 3], [[], 4], [["a", "b", "c"], 5]],
        [[[1, 2], [3, 4], [5]], [[1, 2, 3]], [], [["a", "b", "c"]]],
        """
def chunk(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]
""",
    ),
    _task(
        "def remove_duplicates(items: list) -> list:",
        "Return `items` without repeated values, keeping the first occurrence of each in its original order.",
        [[[3, 1, 3, 2, 1]], [[]], [["a", "b", "a", "c", "b"]], [[5, 5, 5]]],
        [[3, 1, 2], [], ["a", "b", "c"], [5]],
        """
def remove_duplicates(items: list) -> list:
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
""",
    ),
    _task(
        "def word_count(s: str) -> dict[str, int]:",
        "Return how often each word occurs in `s`. Words are separated by whitespace and compared in lower case.",
        [["the cat and The hat"], [""], ["a a a"], ["Go go GO stop"]],
        [{"the": 2, "cat": 1, "and": 1, "hat": 1}, {}, {"a": 3}, {"go": 3, "stop": 1}],
        """
def word_count(s: str) -> dict[str, int]:
    counts = {}
    for word in s.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts
""",
    ),
    _task(
        "def capitalize_words(s: str) -> str:",
        "Return `s` with the first letter of every space-separated word in upper case and the rest of each "
        "word unchanged. Keep the spaces as they are.",
        [["hello world"], ["python  is fun"], [""], ["iPhone and eBay"]],
        ["Hello World", "Python  Is Fun", "", "IPhone And EBay"],
        """
def capitalize_words(s: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))
""",
    ),
    _task(
        "def sum_digits(n: int) -> int:",
        "Return the sum of the decimal digits of n; the sign of a negative number is ignored.",
        [[123], [0], [-45], [99999], [1000001]],
        [6, 0, 9, 45, 2],
        """
def sum_digits(n: int) -> int:
    return sum(int(d) for d in str(abs(n)))
""",
    ),
    _task(
        "def to_binary(n: int) -> str:",
        'Return the binary representation of n >= 0 without a prefix ("0" for zero).',
        [[0], [1], [5], [255], [1024]],
        ["0", "1", "101", "11111111", "10000000000"],
        """
def to_binary(n: int) -> str:
    return format(n, "b")
""",
    ),
    _task(
        "def max_subarray_sum(nums: list[int]) -> int:",
        "Return the largest sum of a non-empty run of consecutive numbers of `nums` (which is not empty).",
        [[[-2, 1, -3, 4, -1, 2, 1, -5, 4]], [[1]], [[-3, -1, -2]], [[5, 4, -1, 7, 8]]],
        [6, 1, -1, 23],
        """
def max_subarray_sum(nums: list[int]) -> int:
    best = current = nums[0]
    for x in nums[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best
""",
    ),
    _task(
        "def merge_sorted(a: list[int], b: list[int]) -> list[int]:",
        "Merge two lists that are sorted in ascending order into one sorted list.",
        [[[1, 3, 5], [2, 4, 6]], [[], [1, 2]], [[1, 1, 2], [1, 3]], [[], []]],
        [[1, 2, 3, 4, 5, 6], [1, 2], [1, 1, 1, 2, 3], []],
        """
def merge_sorted(a: list[int], b: list[int]) -> list[int]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]
""",
    ),
    _task(
        "def rotate_right(items: list, k: int) -> list:",
        "Return `items` rotated k places to the right (k >= 0 may exceed the length); an empty list stays empty.",
        [[[1, 2, 3, 4, 5], 2], [[1, 2, 3], 0], [[1, 2, 3], 4], [[], 3]],
        [[4, 5, 1, 2, 3], [1, 2, 3], [3, 1, 2], []],
        """
def rotate_right(items: list, k: int) -> list:
    if not items:
        return []
    k %= len(items)
    return items[-k:] + items[:-k] if k else list(items)
""",
    ),
    _task(
        "def second_largest(nums: list[int]) -> int:",
        "Return the second largest distinct value of `nums`, which holds at least two distinct values.",
        [[[3, 1, 4, 1, 5]], [[10, 10, 9]], [[-1, -2]], [[7, 7, 7, 8]]],
        [4, 9, -2, 7],
        """
def second_largest(nums: list[int]) -> int:
    return sorted(set(nums))[-2]
""",
    ),
    _task(
        "def run_length_encode(s: str) -> str:",
        'Encode `s` as each run of one character followed by its length, e.g. "aaab" -> "a3b1".',
        [["aaab"], [""], ["abc"], ["zzzzzzzzzzzz"], ["aabbaa"]],
        ["a3b1", "", "a1b1c1", "z12", "a2b2a2"],
        """
def run_length_encode(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(f"{s[i]}{j - i}")
        i = j
    return "".join(out)
""",
    ),
    _task(
        "def caesar_shift(s: str, k: int) -> str:",
        "Shift every ASCII letter of `s` k places forward in the alphabet, wrapping around from z to a and "
        "keeping its case; other characters stay as they are. k may be negative.",
        [["abc", 1], ["xyz", 3], ["Hello, World!", 13], ["abc", -1], ["Zz", 26]],
        ["bcd", "abc", "Uryyb, Jbeyq!", "zab", "Zz"],
        """
def caesar_shift(s: str, k: int) -> str:
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr((ord(c) - 97 + k) % 26 + 97))
        elif "A" <= c <= "Z":
            out.append(chr((ord(c) - 65 + k) % 26 + 65))
        else:
            out.append(c)
    return "".join(out)
""",
    ),
    _task(
        "def is_anagram(a: str, b: str) -> bool:",
        "Return True when `a` and `b` use the same letters the same number of times, ignoring spaces and case.",
        [["listen", "silent"], ["Dormitory", "dirty room"], ["abc", "abd"], ["", ""], ["aab", "abb"]],
        [True, True, False, True, False],
        """
def is_anagram(a: str, b: str) -> bool:
    return sorted(a.replace(" ", "").lower()) == sorted(b.replace(" ", "").lower())
""",
    ),
    _task(
        "def transpose(matrix: list[list[int]]) -> list[list[int]]:",
        "Return the transpose of a rectangular matrix given as a list of rows (an empty matrix stays empty).",
        [[[[1, 2, 3], [4, 5, 6]]], [[[1]]], [[]], [[[1, 2], [3, 4], [5, 6]]]],
        [[[1, 4], [2, 5], [3, 6]], [[1]], [], [[1, 3, 5], [2, 4, 6]]],
        """
def transpose(matrix: list[list[int]]) -> list[list[int]]:
    return [list(row) for row in zip(*matrix)]
""",
    ),
    _task(
        "def running_sum(nums: list[int]) -> list[int]:",
        "Return the list whose i-th item is the sum of nums[0] to nums[i].",
        [[[1, 2, 3, 4]], [[]], [[5]], [[3, -3, 3, -3]]],
        [[1, 3, 6, 10], [], [5], [3, 0, 3, 0]],
        """
def running_sum(nums: list[int]) -> list[int]:
    out, total = [], 0
    for x in nums:
        total += x
        out.append(total)
    return out
""",
    ),
    _task(
        "def longest_common_prefix(words: list[str]) -> str:",
        'Return the longest string that every word starts with ("" for an empty list).',
        [[["flower", "flow", "flight"]], [["dog", "racecar", "car"]], [[]], [["same", "same"]], [["a"]]],
        ["fl", "", "", "same", "a"],
        """
def longest_common_prefix(words: list[str]) -> str:
    if not words:
        return ""
    prefix = words[0]
    for word in words[1:]:
        while not word.startswith(prefix):
            prefix = prefix[:-1]
    return prefix
""",
    ),
    _task(
        "def roman_to_int(s: str) -> int:",
        "Convert a Roman numeral (I, V, X, L, C, D, M, with subtractive forms such as IV and CM) to an integer.",
        [["III"], ["IV"], ["IX"], ["LVIII"], ["MCMXCIV"], ["MMXXIV"]],
        [3, 4, 9, 58, 1994, 2024],
        """
def roman_to_int(s: str) -> int:
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, c in enumerate(s):
        if i + 1 < len(s) and values[c] < values[s[i + 1]]:
            total -= values[c]
        else:
            total += values[c]
    return total
""",
    ),
    _task(
        "def int_to_roman(n: int) -> str:",
        "Convert an integer from 1 to 3999 to a Roman numeral, using subtractive forms (4 is IV, 900 is CM).",
        [[1], [4], [58], [1994], [3999]],
        ["I", "IV", "LVIII", "MCMXCIV", "MMMCMXCIX"],
        """
def int_to_roman(n: int) -> str:
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = []
    for value, numeral in table:
        while n >= value:
            out.append(numeral)
            n -= value
    return "".join(out)
""",
    ),
    _task(
        "def balanced_brackets(s: str) -> bool:",
        "Return True when the brackets (), [] and {} in `s` are balanced and properly nested; other characters "
        "are ignored.",
        [["([]{})"], ["([)]"], [""], ["((("], ["a(b[c]d)e"], ["}{"]],
        [True, False, True, False, True, False],
        """
def balanced_brackets(s: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for c in s:
        if c in "([{":
            stack.append(c)
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack
""",
    ),
    _task(
        "def snake_to_camel(s: str) -> str:",
        'Convert a snake_case name to camelCase: "hello_big_world" -> "helloBigWorld". The first word stays '
        "in lower case.",
        [["hello_big_world"], ["name"], ["a_b_c"], ["parse_http_response"]],
        ["helloBigWorld", "name", "aBC", "parseHttpResponse"],
        """
def snake_to_camel(s: str) -> str:
    first, *rest = s.split("_")
    return first + "".join(w[:1].upper() + w[1:] for w in rest)
""",
    ),
    _task(
        "def camel_to_snake(s: str) -> str:",
        'Convert a camelCase name to snake_case: "helloBigWorld" -> "hello_big_world". Put an underscore '
        "before every upper-case letter and lower it.",
        [["helloBigWorld"], ["name"], ["parseHttpResponse"], ["aBC"]],
        ["hello_big_world", "name", "parse_http_response", "a_b_c"],
        """
def camel_to_snake(s: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in s)
""",
    ),
    _task(
        "def pairs_with_sum(nums: list[int], target: int) -> list[list[int]]:",
        "Return every distinct pair [a, b] with a <= b of values from `nums` (at two different positions) "
        "whose sum is `target`, sorted.",
        [[[1, 2, 3, 4, 5], 6], [[3, 3, 3], 6], [[1, 2], 10], [[-1, 0, 1, 2, -2], 0]],
        [[[1, 5], [2, 4]], [[3, 3]], [], [[-2, 2], [-1, 1]]],
        """
def pairs_with_sum(nums: list[int], target: int) -> list[list[int]]:
    found = set()
    for i in range(len(nums)):
        for j in range(i + 1, len(nums)):
            if nums[i] + nums[j] == target:
                found.add((min(nums[i], nums[j]), max(nums[i], nums[j])))
    return [list(p) for p in sorted(found)]
""",
    ),
    _task(
        "def dot_product(a: list[int], b: list[int]) -> int:",
        "Return the dot product of two lists of the same length.",
        [[[1, 2, 3], [4, 5, 6]], [[], []], [[-1, 2], [3, 4]], [[0, 0], [5, 7]]],
        [32, 0, 5, 0],
        """
def dot_product(a: list[int], b: list[int]) -> int:
    return sum(x * y for x, y in zip(a, b))
""",
    ),
    _task(
        "def median(nums: list[float]) -> float:",
        "Return the median of a non-empty list: the middle value after sorting, or the mean of the two middle "
        "values when the length is even.",
        [[[3, 1, 2]], [[4, 1, 3, 2]], [[5]], [[1, 1, 2, 10]]],
        [2, 2.5, 5, 1.5],
        """
def median(nums: list[float]) -> float:
    s = sorted(nums)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
""",
    ),
    _task(
        "def most_common_char(s: str) -> str:",
        "Return the character that occurs most often in the non-empty string `s`; on a tie, the one that occurs first.",
        [["banana"], ["abc"], ["aabbb"], ["mississippi"]],
        ["a", "a", "b", "i"],
        """
def most_common_char(s: str) -> str:
    return max(s, key=lambda c: (s.count(c), -s.index(c)))
""",
    ),
    _task(
        "def triangle_type(a: int, b: int, c: int) -> str:",
        'Return "invalid" when the sides cannot form a triangle with positive area, else "equilateral", '
        '"isosceles" or "scalene".',
        [[3, 3, 3], [3, 3, 5], [3, 4, 5], [1, 2, 3], [0, 1, 1], [5, 3, 3]],
        ["equilateral", "isosceles", "scalene", "invalid", "invalid", "isosceles"],
        """
def triangle_type(a: int, b: int, c: int) -> str:
    x, y, z = sorted((a, b, c))
    if x <= 0 or x + y <= z:
        return "invalid"
    if x == z:
        return "equilateral"
    return "isosceles" if x == y or y == z else "scalene"
""",
    ),
    _task(
        "def is_leap_year(year: int) -> bool:",
        "Return True for a leap year of the Gregorian calendar: divisible by 4, except centuries that are not "
        "divisible by 400.",
        [[2024], [1900], [2000], [2023], [2400]],
        [True, False, True, False, True],
        """
def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
""",
    ),
    _task(
        "def days_in_month(year: int, month: int) -> int:",
        "Return the number of days in a month (1 to 12) of a year of the Gregorian calendar.",
        [[2024, 2], [2023, 2], [2023, 4], [2023, 12], [1900, 2]],
        [29, 28, 30, 31, 28],
        """
def days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31
""",
    ),
    _task(
        "def collatz_steps(n: int) -> int:",
        "Return how many steps the Collatz rule (halve an even number, else take 3n + 1) needs to bring n >= 1 "
        "down to 1.",
        [[1], [2], [6], [27], [97]],
        [0, 1, 8, 111, 118],
        """
def collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps
""",
    ),
    _task(
        "def prime_factors(n: int) -> list[int]:",
        "Return the prime factors of n >= 2 in ascending order, each as often as it divides n.",
        [[12], [13], [360], [97], [1001]],
        [[2, 2, 3], [13], [2, 2, 2, 3, 3, 5], [97], [7, 11, 13]],
        """
def prime_factors(n: int) -> list[int]:
    out, d = [], 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    if n > 1:
        out.append(n)
    return out
""",
    ),
    _task(
        "def interleave(a: list, b: list) -> list:",
        "Return the items of `a` and `b` taken alternately, starting with `a`; the rest of the longer list "
        "follows at the end.",
        [[[1, 2, 3], ["a", "b", "c"]], [[1], [2, 3, 4]], [[], [1]], [[1, 2, 3], []]],
        [[1, "a", 2, "b", 3, "c"], [1, 2, 3, 4], [1], [1, 2, 3]],
        """
def interleave(a: list, b: list) -> list:
    out = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            out.append(a[i])
        if i < len(b):
            out.append(b[i])
    return out
""",
    ),
]

TEST: list[Task] = [
    _task(
        "def normalize_whitespace(s: str) -> str:",
        "Return `s` with leading and trailing whitespace removed and every inner run of whitespace replaced by "
        "one space.",
        [["  hello   world  "], ["a\tb\nc"], [""], ["   "], ["one"]],
        ["hello world", "a b c", "", "", "one"],
        """
def normalize_whitespace(s: str) -> str:
    return " ".join(s.split())
""",
    ),
    _task(
        "def is_power_of_two(n: int) -> bool:",
        "Return True when n is a power of two (1, 2, 4, 8, ...). Zero and negative numbers are not.",
        [[1], [2], [6], [0], [-4], [1024], [1023]],
        [True, True, False, False, False, True, False],
        """
def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
""",
    ),
    _task(
        "def count_islands(grid: list[str]) -> int:",
        'Count the islands of a grid given as equal-length strings of "1" (land) and "0" (water). Land cells '
        "that touch up, down, left or right belong to the same island.",
        [[["11000", "11000", "00100", "00011"]], [["0"]], [["101", "010", "101"]], [[]], [["111", "101", "111"]]],
        [3, 0, 5, 0, 1],
        """
def count_islands(grid: list[str]) -> int:
    seen = set()
    islands = 0
    for r in range(len(grid)):
        for c in range(len(grid[r])):
            if grid[r][c] != "1" or (r, c) in seen:
                continue
            islands += 1
            stack = [(r, c)]
            seen.add((r, c))
            while stack:
                y, x = stack.pop()
                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == "1" and (ny, nx) not in seen:
                        seen.add((ny, nx))
                        stack.append((ny, nx))
    return islands
""",
    ),
    _task(
        "def group_anagrams(words: list[str]) -> list[list[str]]:",
        "Group words that are anagrams of each other. Sort the words inside each group, and sort the groups by "
        "their first word.",
        [[["eat", "tea", "tan", "ate", "nat", "bat"]], [[]], [["abc"]], [["ab", "ba", "cd", "dc", "ab"]]],
        [[["ate", "eat", "tea"], ["bat"], ["nat", "tan"]], [], [["abc"]], [["ab", "ab", "ba"], ["cd", "dc"]]],
        """
def group_anagrams(words: list[str]) -> list[list[str]]:
    groups = {}
    for word in words:
        groups.setdefault("".join(sorted(word)), []).append(word)
    return sorted(sorted(group) for group in groups.values())
""",
    ),
    _task(
        "def lcm_of_list(nums: list[int]) -> int:",
        "Return the least common multiple of a non-empty list of positive integers.",
        [[[4, 6]], [[1, 2, 3, 4, 5]], [[7]], [[12, 15, 20]], [[2, 3, 5, 7, 11, 13]]],
        [12, 60, 7, 60, 30030],
        """
def lcm_of_list(nums: list[int]) -> int:
    from math import gcd

    result = 1
    for x in nums:
        result = result * x // gcd(result, x)
    return result
""",
    ),
    _task(
        "def is_valid_ipv4(s: str) -> bool:",
        "Return True when `s` is a dotted IPv4 address: four decimal numbers from 0 to 255 separated by dots, "
        'with no leading zeros ("01" is invalid, "0" is fine) and nothing else.',
        [["192.168.0.1"], ["255.255.255.255"], ["256.1.1.1"], ["1.2.3"], ["01.2.3.4"], ["0.0.0.0"], ["1.2.3.a"]],
        [True, True, False, False, False, True, False],
        """
def is_valid_ipv4(s: str) -> bool:
    parts = s.split(".")
    if len(parts) != 4:
        return False
    for part in parts:
        if not part.isdigit() or not part.isascii() or (len(part) > 1 and part[0] == "0") or int(part) > 255:
            return False
    return True
""",
    ),
    _task(
        "def spiral_order(matrix: list[list[int]]) -> list[int]:",
        "Return the items of a rectangular matrix in clockwise spiral order, starting at the top-left corner.",
        [[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]], [[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]], [[]], [[[1], [2], [3]]]],
        [[1, 2, 3, 6, 9, 8, 7, 4, 5], [1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7], [], [1, 2, 3]],
        """
def spiral_order(matrix: list[list[int]]) -> list[int]:
    out = []
    rows = [list(r) for r in matrix]
    while rows:
        out.extend(rows.pop(0))
        rows = [list(r) for r in zip(*rows)][::-1]
    return out
""",
    ),
    _task(
        "def pascal_row(n: int) -> list[int]:",
        "Return row n of Pascal's triangle, counting from row 0, which is [1].",
        [[0], [1], [4], [6]],
        [[1], [1, 1], [1, 4, 6, 4, 1], [1, 6, 15, 20, 15, 6, 1]],
        """
def pascal_row(n: int) -> list[int]:
    row = [1]
    for _ in range(n):
        row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]
    return row
""",
    ),
    _task(
        "def compress_ranges(nums: list[int]) -> list[str]:",
        'Describe a sorted list of distinct integers as ranges: a run of consecutive numbers becomes "a-b", a '
        'lone number stays "a".',
        [[[1, 2, 3, 5, 7, 8]], [[]], [[4]], [[-3, -2, -1, 1]], [[1, 3, 5]]],
        [["1-3", "5", "7-8"], [], ["4"], ["-3--1", "1"], ["1", "3", "5"]],
        """
def compress_ranges(nums: list[int]) -> list[str]:
    out = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return out
""",
    ),
    _task(
        "def squeeze(s: str) -> str:",
        'Return `s` with every run of the same character reduced to one character: "aabccc" -> "abc".',
        [["aabccc"], [""], ["abc"], ["aaaa"], ["abba"]],
        ["abc", "", "abc", "a", "aba"],
        """
def squeeze(s: str) -> str:
    return "".join(c for i, c in enumerate(s) if i == 0 or s[i - 1] != c)
""",
    ),
    _task(
        "def kth_smallest(nums: list[int], k: int) -> int:",
        "Return the k-th smallest item of `nums`, counting from k = 1; repeated values count separately.",
        [[[7, 10, 4, 3, 20, 15], 3], [[1], 1], [[5, 5, 1], 2], [[3, 2, 1], 3]],
        [7, 1, 5, 3],
        """
def kth_smallest(nums: list[int], k: int) -> int:
    return sorted(nums)[k - 1]
""",
    ),
    _task(
        "def hamming_distance(a: str, b: str) -> int:",
        "Return the number of positions at which two strings of the same length differ.",
        [["karolin", "kathrin"], ["", ""], ["abc", "abc"], ["1011101", "1001001"]],
        [3, 0, 0, 2],
        """
def hamming_distance(a: str, b: str) -> int:
    return sum(x != y for x, y in zip(a, b))
""",
    ),
    _task(
        "def to_base(n: int, base: int) -> str:",
        "Write n >= 0 in a base from 2 to 36, with digits 0-9 then lower-case letters a-z.",
        [[255, 16], [0, 2], [10, 2], [35, 36], [100, 7]],
        ["ff", "0", "1010", "z", "202"],
        """
def to_base(n: int, base: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, base)
        out.append(digits[r])
    return "".join(reversed(out))
""",
    ),
    _task(
        "def longest_word(s: str) -> str:",
        'Return the longest whitespace-separated word of `s`; on a tie, the first one ("" when there is none).',
        [["the quick brown fox"], [""], ["a bb cc"], ["jumped over the lazy dog"]],
        ["quick", "", "bb", "jumped"],
        """
def longest_word(s: str) -> str:
    best = ""
    for word in s.split():
        if len(word) > len(best):
            best = word
    return best
""",
    ),
    _task(
        "def diagonal_sum(matrix: list[list[int]]) -> int:",
        "Return the sum of both diagonals of a square matrix, counting the centre of an odd-sized matrix once.",
        [
            [[[1, 2, 3], [4, 5, 6], [7, 8, 9]]],
            [[[5]]],
            [[[1, 2], [3, 4]]],
            [[[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]],
        ],
        [25, 5, 10, 8],
        """
def diagonal_sum(matrix: list[list[int]]) -> int:
    n = len(matrix)
    total = sum(matrix[i][i] + matrix[i][n - 1 - i] for i in range(n))
    return total - (matrix[n // 2][n // 2] if n % 2 else 0)
""",
    ),
    _task(
        "def next_palindrome(n: int) -> int:",
        "Return the smallest palindromic number (reading the same backwards in decimal) that is greater than n >= 0.",
        [[0], [9], [10], [123], [999], [808]],
        [1, 11, 11, 131, 1001, 818],
        """
def next_palindrome(n: int) -> int:
    n += 1
    while str(n) != str(n)[::-1]:
        n += 1
    return n
""",
    ),
]
