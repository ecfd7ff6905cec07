"""Django 5 against Weir: `migrate` of contrib.auth, contenttypes and a small app (its
foreign keys DEFERRABLE INITIALLY DEFERRED, varchar_pattern_ops indexes, identity columns,
JSON and decimal fields), then the ORM: create, bulk_create, annotate/aggregate,
select_related, a JSON containment filter, update, cascading delete, a transaction whose
dangling foreign key fails at COMMIT, and `flush` (ids start over). Prints `ok <check>` per check (tests/clients.rs).

Usage: django_check.py PORT
"""
import atexit
import os
import shutil
import sys
import tempfile

PORT = sys.argv[1]

MODELS = '''
from django.db import models
from django.contrib.auth.models import User


class Post(models.Model):
    author = models.ForeignKey(User, on_delete=models.CASCADE, related_name="posts")
    title = models.CharField(max_length=200, db_index=True)
    body = models.TextField(blank=True)
    score = models.DecimalField(max_digits=8, decimal_places=2, default=0)
    published = models.DateTimeField(null=True)
    tags = models.JSONField(default=list)


class Comment(models.Model):
    post = models.ForeignKey(Post, on_delete=models.CASCADE, related_name="comments")
    text = models.CharField(max_length=500)
'''


def ok(name):
    print(f"ok {name}", flush=True)


def main():
    root = tempfile.mkdtemp(prefix="weir-django-")
    atexit.register(shutil.rmtree, root, True)
    os.makedirs(os.path.join(root, "blog"))
    open(os.path.join(root, "blog", "__init__.py"), "w").close()
    with open(os.path.join(root, "blog", "models.py"), "w") as f:
        f.write(MODELS)
    sys.path.insert(0, root)

    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="weir",
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "blog"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "HOST": "127.0.0.1",
                "PORT": PORT,
                "USER": "weir",
                "NAME": "weir",
            }
        },
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    from django.core.management import call_command
    from django.db import IntegrityError, connection, transaction
    from django.db.models import Count, Sum

    call_command("makemigrations", "blog", verbosity=0)
    call_command("migrate", verbosity=0)
    with connection.cursor() as c:
        c.execute(
            "SELECT condeferrable, condeferred FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid = 'blog_comment'::regclass"
        )
        assert c.fetchall() == [(True, True)]
    ok("django migrate")

    from django.contrib.auth.models import User

    from blog.models import Comment, Post

    u = User.objects.create_user("ann", password="pw")
    assert User.objects.get(username="ann").check_password("pw")
    with transaction.atomic():
        p = Post.objects.create(author=u, title="Hello", score="1.50", tags=["a", "b"])
        Comment.objects.bulk_create([Comment(post=p, text=f"c{i}") for i in range(3)])
    got = list(Post.objects.annotate(n=Count("comments")).values_list("title", "n"))
    assert got == [("Hello", 3)], got
    assert Post.objects.filter(tags__contains=["a"]).count() == 1
    got = list(Post.objects.select_related("author").values_list("author__username", "score"))
    assert [(a, str(s)) for a, s in got] == [("ann", "1.50")], got
    Post.objects.filter(pk=p.pk).update(score=5)
    total = Post.objects.aggregate(Sum("score"))["score__sum"]
    assert str(total) == "5.00", total
    ok("django orm")

    # a comment of a post that does not exist: the deferred key fails at COMMIT
    try:
        with transaction.atomic():
            Comment.objects.create(post_id=999_999, text="dangling")
        raise AssertionError("a dangling foreign key was committed")
    except IntegrityError:
        pass
    assert Comment.objects.filter(text="dangling").count() == 0
    ok("django deferred foreign key")

    p.delete()
    assert Comment.objects.count() == 0
    ok("django cascade delete")

    # flush: TRUNCATE ... RESTART IDENTITY CASCADE of every table; ids start over
    call_command("flush", interactive=False, verbosity=0)
    assert User.objects.count() == 0
    again = User.objects.create_user("bob", password="pw")
    assert again.id == 1, again.id
    ok("django flush")


if __name__ == "__main__":
    main()
